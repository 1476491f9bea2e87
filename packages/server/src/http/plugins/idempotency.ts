import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import type { IncomingHttpHeaders } from 'node:http';
import { H } from '@gw/schema';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { warnOnFailure } from '../../lib/error-summary.js';
import { type Claim, checkIdempotencyKey, fingerprint, idempotencyScope, type StoredAnswer } from '../../routing/idempotency.js';
import { notKeptAnswer } from '../../routing/kept-answers.js';
import { endedByShutdown } from '../../streaming/sse-format.js';
import { type StreamEvent, SYNTHETIC_SEQ } from '../../streaming/types.js';
import { REPLAYED_HEADERS, replayable, sendReplay } from '../idempotent-replay.js';
import type { Services } from '../services.js';
import { applyRateLimit, countUncounted } from './rate-limit.js';
import { recordOutlivedClient } from './usage-recording.js';

/** How long archiving a finished stream's events may take. */
const ARCHIVE_TIMEOUT_MS = 30_000;

/**
 * X-Idempotency-Key on every POST of the public API (both variants). It
 * runs in preHandler: after authentication, the rate limit and body
 * validation, so a request refused by those never claims its key; the
 * budget hold comes later, in the handler. The answer is stored in onSend
 * only if an upstream call was made and the gateway did not fail (5xx);
 * otherwise the key is released, and a retry runs afresh.
 */
export function registerIdempotency(app: FastifyInstance, services: Services): void {
  const claims = new WeakMap<FastifyRequest, Claim>();
  // Callback-style: a request without a key (the usual case) passes without a promise.
  app.addHook('preHandler', (request, reply, done) => {
    const raw = request.headers[H.idempotencyKey];
    const apiKey = request.gw.key;
    if (request.method !== 'POST' || raw === undefined || !apiKey) return done();
    // A replay has answered: the handler must not run. Fastify would run it if `reply.sent` were false, as it stays
    // for a replayed stream whose client left mid-way (the response destroyed, never ended): a fresh upstream call,
    // billed a second time, after the very retry that the key was sent to make safe.
    claimOrReplay(request, reply, raw, apiKey.id).then((replayed) => (replayed ? undefined : done()), done);
  });
  /** True once a stored answer is being replayed (sent, not awaited to its end); false when the request claimed its key and runs. */
  async function claimOrReplay(request: FastifyRequest, reply: FastifyReply, raw: string | string[], apiKeyId: string): Promise<boolean> {
    const key = checkIdempotencyKey(raw, request.raw.rawHeaders);
    const extra = (await uploadDigest(request)) + routingAskedFor(request.headers);
    const fp = fingerprint(request.method, request.url, request.body, extra, request.gw.exactIntegers);
    const begun = await services.idempotency.begin(idempotencyScope(apiKeyId, key), fp, (answer) => replayable(services, answer), request.id);
    if (begun.kind === 'replay') {
      // A repeat counts against the rate limit, also one the limiter left out for naming a model its key can no longer
      // use (its workspace stopped enabling it, or it left the registry): it still reads the stored answer.
      if (!request.gw.counted) {
        countUncounted(services, request);
        await applyRateLimit(request, reply);
      }
      await sendReplay(services, request, reply, begun.answer);
      return true;
    }
    // A repeat that waited for the first request (which then failed) runs now: its key may have been revoked, or its
    // limits changed, meanwhile. A revoked key makes no upstream call after its revocation has answered.
    if (begun.waited) await currentKey(request, begun.claim);
    claims.set(request, begun.claim);
    services.lifecycle.claimsHeld++;
    return false;
  }
  /** The request's API key as it is now (401 if revoked, the claim then given up). */
  async function currentKey(request: FastifyRequest, claim: Claim): Promise<void> {
    try {
      request.gw.key = await services.auth.authenticate(request.headers.authorization);
    } catch (err) {
      await claim.release().catch(warnOnFailure(request.log, 'idempotency: releasing the key failed'));
      throw err;
    }
  }
  // Callback-style so that the common case, a request without a key, costs no promise.
  app.addHook('onSend', (request, reply, payload, done) => {
    const claim = claims.get(request);
    if (!claim) return done(null, payload);
    claims.delete(request);
    // A keyed request runs on when its client leaves: with its answer ready, it is recorded now.
    recordOutlivedClient(services, request, reply);
    void settle(services, request, reply, payload, claim)
      .catch(warnOnFailure(request.log, 'idempotency: storing the answer failed'))
      .then(() => {
        services.lifecycle.claimsHeld--;
        done(null, payload);
      });
  });
  // Whatever ended the request without a reply being sent, its key is not left claimed.
  app.addHook('onResponse', (request, _reply, done) => {
    const claim = claims.get(request);
    claims.delete(request);
    done();
    if (!claim) return;
    void claim
      .release()
      .catch(() => {})
      .then(() => {
        services.lifecycle.claimsHeld--;
      });
  });
}

async function settle(services: Services, request: FastifyRequest, reply: FastifyReply, payload: unknown, claim: Claim): Promise<void> {
  const status = reply.statusCode;
  // Refused before any upstream call (400, 402, 404, 503 no healthy provider…) or failed in the gateway or upstream (5xx): safe to retry.
  if (request.gw.upstreamCalls === 0 || status >= 500) return claim.release();
  const headers = storedHeaders(reply);
  if (isStream(payload)) {
    const id = request.id;
    // Its time is for a repeat on an older gateway, which tells by it whether a missing shared record may still be on
    // its way (this one reads the answer's age by Redis's clock). Without Redis, its instance: a repeat elsewhere tells
    // by it a stream whose instance died from one running.
    const instance = services.storePresence?.id;
    const stream = instance === undefined ? { id, at: Date.now() } : { id, at: Date.now(), instance };
    const begun = claim.complete({ status, headers, stream });
    // Archived even if storing the begun answer fails (Redis away): the archive, with every event, is what replays
    // for 24 hours, where the begun answer replays only while the resume buffer keeps the stream.
    void archiveStream(services, request.gw.key?.id ?? '', claim, { status, headers, stream }, begun).catch(
      warnOnFailure(request.log, 'idempotency: archiving the stream failed; it replays from the resume buffer while that lasts'),
    );
    await begun;
    return;
  }
  const body = Buffer.isBuffer(payload) ? payload.toString('utf8') : String(payload ?? '');
  const bytes = Buffer.byteLength(body);
  const allowance = services.keptAnswers;
  if (!allowance.take(request.gw.key?.id ?? '', bytes)) {
    return claim.complete(notKeptAnswer(status, bytes, allowance.limitBytes, request.gw.variant));
  }
  await claim.complete({ status, headers, body });
}

/** Once the stream ends, its events are stored with the answer, so it replays for 24 hours, not only while the resume buffer keeps it. */
async function archiveStream(
  services: Services,
  keyId: string,
  claim: Claim,
  answer: StoredAnswer & { stream: NonNullable<StoredAnswer['stream']> },
  begun: Promise<void>,
): Promise<void> {
  const id = answer.stream.id;
  const session = services.sessions.get(id);
  let events: StreamEvent[] = [];
  if (session) {
    // This instance relayed the whole stream: its own log, not the shared buffer, which a Redis restart may have
    // left with holes (an archive of them replayed a gap's error event, or nothing).
    await session.finished;
    events = [...session.log];
  } else {
    for await (const e of services.streams.follow(id, 0, AbortSignal.timeout(ARCHIVE_TIMEOUT_MS))) events.push(e);
  }
  // Written after the begun answer, never before: on a pool of database connections the two writes of a stream
  // that ended within moments could land in the other order, the begun answer left for 24 hours without its events.
  await begun.catch(() => {});
  const last = events.at(-1);
  // Ended by its instance's shutdown, not by the provider or the client: the key is given up, so that a retry with it
  // runs on another instance rather than replay the cut stream for 24 hours.
  if (endedByShutdown(last)) return claim.drop();
  if (last?.kind !== 'done' && last?.kind !== 'error') return;
  // An event the buffer made up for a gap is no part of the stream: replays keep following the buffer instead.
  if (events.some((e) => e.seq === SYNTHETIC_SEQ)) return;
  let bytes = 0;
  for (const e of events) bytes += Buffer.byteLength(e.data);
  // Past the key's allowance the events are not archived: a repeat replays them from the resume buffer while it has
  // them, then is told they were not kept. Left as begun, the answer had a repeat without that buffer (instances
  // sharing PostgreSQL only) wait for events that never come, and answer 409 "still in progress" for 24 hours.
  if (!services.keptAnswers.take(keyId, bytes)) return claim.complete({ ...answer, stream: { ...answer.stream, notKept: bytes } });
  await claim.complete({ status: answer.status, headers: answer.headers, stream: { id, events } });
}

function storedHeaders(reply: FastifyReply): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of REPLAYED_HEADERS) {
    const v = reply.getHeader(name);
    if (v !== undefined) out[name] = Array.isArray(v) ? v.join(', ') : String(v);
  }
  return out;
}

function isStream(payload: unknown): boolean {
  return typeof payload === 'object' && payload !== null && typeof (payload as { pipe?: unknown }).pipe === 'function';
}

/**
 * The routing a request asked for is part of it: a request pinned to one provider (or barred from failing over) that
 * replayed the answer another provider gave would break its own terms. Only what differs from the defaults is
 * written, so a request without routing headers keeps the fingerprint it had, and `X-Gateway-Strategy: default` is
 * no other request than none.
 */
function routingAskedFor(headers: IncomingHttpHeaders): string {
  let out = '';
  const pin = headers[H.provider];
  if (pin !== undefined) out += `\npin:${String(pin).trim()}`;
  const prefer = headers[H.providerPrefer];
  if (prefer !== undefined) out += `\nprefer:${String(prefer).trim()}`;
  const strategy = headers[H.strategy];
  if (strategy !== undefined && String(strategy).trim() !== 'default') out += `\nstrategy:${String(strategy).trim()}`;
  const hops = headers[H.maxHops];
  if (hops !== undefined && String(hops).trim() !== '2') out += `\nhops:${String(hops).trim()}`;
  return out;
}

/** Multipart uploads are spooled to disk: their bytes are part of the fingerprint, not only their file name. */
async function uploadDigest(request: FastifyRequest): Promise<string> {
  const file = (request as { spool?: { file?: { path?: unknown } | null } | null }).spool?.file;
  if (typeof file?.path !== 'string') return '';
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(file.path)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}
