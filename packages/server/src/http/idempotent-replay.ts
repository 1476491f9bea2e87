import { Readable } from 'node:stream';
import { H } from '@gw/schema';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { GatewayError } from '../errors/gateway-error.js';
import type { StoredAnswer } from '../routing/idempotency.js';
import { notKeptMessage } from '../routing/kept-answers.js';
import { parseEventId } from '../streaming/sse-format.js';
import { headWhenPiped, includeUsage, sseFrames } from '../streaming/sse-frames.js';
import { RECORD_PATIENCE_MS, type StreamEvent } from '../streaming/types.js';
import { newUsageDraft } from './context.js';
import type { Services } from './services.js';

/** The headers of a first answer that a replay repeats (never the rate-limit or request-id headers, which are the repeat's own). */
export const REPLAYED_HEADERS = [
  'content-type',
  'cache-control',
  H.accelBuffering,
  H.provider,
  H.region,
  H.strategy,
  H.routingHops,
  H.retryAfter,
  H.retryAfterMs,
  H.shouldRetry,
] as const;

/**
 * The first answer's status, headers and body (or its stream), marked `Idempotent-Replayed: true`; no upstream call, no
 * charge. Resolves once the answer is handed to Fastify, not once it is written out.
 */
export async function sendReplay(services: Services, request: FastifyRequest, reply: FastifyReply, answer: StoredAnswer): Promise<void> {
  request.gw.usage = null;
  // Billed nothing again; its end line still names the model it named and the provider that gave the first answer.
  const model = request.gw.countedModel;
  if (model !== null) request.gw.usageDone = { ...newUsageDraft(model.kind, model.id), provider: answer.headers[H.provider] ?? null };
  const events = answer.stream ? await replayEvents(services, reply, answer.status, answer.stream, resumeAfter(request, answer.stream.id)) : null;
  for (const [name, value] of Object.entries(answer.headers)) reply.header(name, value);
  reply.header(H.idempotentReplayed, 'true');
  reply.code(answer.status);
  if (events && answer.stream) {
    const frames = sseFrames(events, answer.stream.id, includeUsage(request.body), services.config.streamHeartbeatMs, request.gw.variant);
    headWhenPiped(reply.raw);
    reply.send(Readable.from(frames, { objectMode: false }));
    return;
  }
  reply.send(answer.body ?? '');
}

/**
 * A JSON answer, a stream with its stored events, or one whose events this instance can read (its own session, or
 * the shared buffer): true. A stream that cannot be read yet (its shared record not written yet): false, wait.
 * 'abandoned': in the embedded setup (one process), a stream that no session here relays and that has no usage
 * record, which an earlier life of the process left unfinished (never billed: a stream is billed at its end): the
 * request runs afresh. Elsewhere a stream whose instance looks gone may still be relayed (Redis restarted, or a
 * partition), and running it again could bill it twice: it is replayed as far as it got, ending in an error event.
 * With Redis, a stream whose shared record is still missing RECORD_PATIENCE_MS after its answer was stored is gone from the
 * buffer (expired, or its instance died before writing it) and its events were never stored with its answer (its
 * instance died or was cut off first): true, and the replay is the final 404 rather than a 409 for 24 hours. Without
 * Redis, instances sharing PostgreSQL answer so a stream whose relaying instance no longer says it is alive there.
 */
export async function replayable(services: Services, answer: StoredAnswer): Promise<boolean | 'abandoned'> {
  const stream = answer.stream;
  if (!stream || stream.events || stream.notKept !== undefined || services.sessions.get(stream.id) !== undefined) return true;
  if ((await services.streams.meta(stream.id)) !== null) return true;
  // The relaying instance writes the record with the stream's first event, before the answer a repeat found. The
  // answer's age is Redis's (no two instances' clocks compared); the time it names, only for an older gateway's answer.
  if (services.config.redisUrl) return (stream.ageMs ?? Date.now() - begunAt(stream)) >= RECORD_PATIENCE_MS;
  // PostgreSQL without Redis: no shared buffer, the events come with the answer once the stream ends; wait for them
  // while the instance relaying it is alive. One that died (its stream will never end) is the final 404, as with
  // Redis: it may have been billed (its word lapses in a partition from the database too), so it is never run again.
  if (services.config.databaseUrl) {
    const presence = services.storePresence;
    if (!presence || stream.instance === undefined) return false;
    return !(await presence.alive(stream.instance));
  }
  // The embedded store has one process: the stream ran in an earlier life of it. Billed means it ended (its events are gone: 404).
  const billed = await services.store.usage.list({ requestId: stream.id }).then(
    (records) => records.length > 0,
    () => null,
  );
  // The store cannot say: wait, as for an answer not readable yet, rather than risk running a billed request twice.
  return billed === null ? false : billed ? true : 'abandoned';
}

/** When the stream began; for an answer stored without its time, the time its request id begins with (`req_` + 12 hex of ms). */
function begunAt(stream: NonNullable<StoredAnswer['stream']>): number {
  if (stream.at !== undefined) return stream.at;
  const ms = /^req_([0-9a-f]{12})[0-9a-f]{16}$/.exec(stream.id)?.[1];
  return ms === undefined ? 0 : Number.parseInt(ms, 16);
}

/** A finished stream from its stored events; one still running (or just ended) from the resume buffer, live. */
async function replayEvents(
  services: Services,
  reply: FastifyReply,
  status: number,
  stream: NonNullable<StoredAnswer['stream']>,
  afterSeq: number,
): Promise<AsyncIterable<StreamEvent>> {
  if (stream.events) return fromArray(stream.events.filter((e) => e.seq > afterSeq));
  const local = services.sessions.get(stream.id);
  if (local) return local.follow(afterSeq);
  if (!(await services.streams.meta(stream.id))) {
    if (stream.notKept !== undefined) {
      throw new GatewayError('unprocessable', notKeptMessage(status, stream.notKept, services.keptAnswers.limitBytes), { param: 'X-Idempotency-Key' });
    }
    throw new GatewayError('stream_not_found', 'The stream first answered to this X-Idempotency-Key is no longer available.', { param: 'X-Idempotency-Key' });
  }
  const abort = new AbortController();
  reply.raw.once('close', () => abort.abort());
  return services.streams.follow(stream.id, afterSeq, abort.signal);
}

/** A repeat that also carries `Last-Event-ID` of this very stream wants only what follows that event, as any resume does. */
function resumeAfter(request: FastifyRequest, streamId: string): number {
  const raw = request.headers['last-event-id'];
  const parsed = typeof raw === 'string' ? parseEventId(raw) : null;
  return parsed && parsed.streamId === streamId ? parsed.seq : 0;
}

async function* fromArray(events: StreamEvent[]): AsyncGenerator<StreamEvent> {
  yield* events;
}
