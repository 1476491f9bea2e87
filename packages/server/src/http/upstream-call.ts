import type { ServerResponse } from 'node:http';
import { H, type Strategy } from '@gw/schema';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { GatewayError } from '../errors/gateway-error.js';
import { UpstreamError } from '../errors/upstream-error.js';
import { redactSecrets } from '../lib/redact.js';
import type { AbortListener, CancelSignal } from '../providers/http-client.js';
import type { PaidPart, ProviderAdapter } from '../providers/types.js';
import type { LatencyMode, OfferStats } from '../routing/offer-stats.js';
import type { Offer } from '../routing/registry.js';
import type { StreamRouting } from '../streaming/types.js';
import type { UsageDraft } from './context.js';
import type { Services } from './services.js';
import { countAtMost } from './usage-bounds.js';

/**
 * Calls one offer's adapter, timing it as upstream time, and teaches the
 * router what the attempt showed: its latency (for a stream the call ends
 * once its answer begins, not at the role chunk before it, so that is time
 * to first token) and whether the offer answered, failed or timed out. `completionTokens`: for a non-streamed chat
 * call, the most it may generate (its per-choice cap times `n`), against which a timeout of its headers is weighed.
 */
export async function callUpstream<T>(
  services: Services,
  request: FastifyRequest,
  offer: Offer,
  fn: (adapter: ProviderAdapter) => Promise<T>,
  completionTokens?: number,
): Promise<T> {
  const adapter = services.adapters.get(offer.provider);
  if (!adapter) throw new UpstreamError({ kind: 'connect', provider: offer.provider, message: `no adapter for ${offer.provider}` });
  const stats = services.offerStats;
  const mode = streams(request) ? 'stream' : 'full';
  request.gw.upstreamCalls++;
  // The provider of the request's usage row, whatever the attempt's outcome: a request that fails names the last one
  // tried (a success is named by its route, at its bill).
  const usage = request.gw.usage;
  if (usage !== null) usage.provider = offer.provider;
  const probe = stats.started(offer);
  const started = performance.now();
  let outcome = 'ok';
  try {
    const value = await fn(adapter);
    stats.record(offer, 'ok', performance.now() - started, mode);
    return value;
  } catch (err) {
    outcome = err instanceof UpstreamError ? err.kind : 'error';
    learnFromFailure(stats, offer, probe, err, performance.now() - started, mode, completionTokens);
    // The provider has no such model (any more): its list most likely says so too.
    if (err instanceof UpstreamError && err.kind === 'http' && err.status === 404) services.registry.recheck();
    // What the provider did, for the operator (the client sees the gateway's own code); secrets taken out as for the client.
    if (providerFault(err)) {
      request.log.warn(
        { provider: offer.provider, upstreamModel: offer.upstreamModel, kind: err.kind, status: err.status, ms: Math.round(performance.now() - started) },
        `upstream attempt failed: ${redactSecrets(err.detail)}`,
      );
    }
    throw err;
  } finally {
    const ms = performance.now() - started;
    request.gw.upstreamMs += ms;
    services.metrics.observeUpstream(offer.provider, outcome, ms / 1000);
  }
}

/**
 * {@link callUpstream} for a call its provider may bill in parts (UpstreamCall.paid): each part goes on the request's
 * usage as it is told, its prompt tokens at most `promptTokensAtMost` (what the whole request could cost,
 * usage-bounds.ts); if the call succeeds, its result counts the whole, which the route bills, and the parts are
 * taken back off.
 */
export async function callUpstreamPaidInParts<T>(
  services: Services,
  request: FastifyRequest,
  offer: Offer,
  promptTokensAtMost: number,
  fn: (adapter: ProviderAdapter, paid: (part: PaidPart) => void) => Promise<T>,
): Promise<T> {
  // The request's usage before the attempt's first paid part, restored if the attempt succeeds.
  let beforeParts: UsageDraft | null = null;
  const paid = (part: PaidPart) => {
    const usage = request.gw.usage;
    if (!usage) return;
    beforeParts ??= { ...usage };
    const prompt = countAtMost(request.log, offer.provider, 'prompt tokens of a part', part.promptTokens, promptTokensAtMost);
    billPart(usage, offer, prompt === part.promptTokens ? part : { ...part, promptTokens: prompt });
  };
  return callUpstream(services, request, offer, async (adapter) => {
    const value = await fn(adapter, paid);
    if (beforeParts !== null && request.gw.usage) Object.assign(request.gw.usage, beforeParts);
    return value;
  });
}

/**
 * A part of a call its provider answered, and billed, before the call ended goes on the request's usage at once, at
 * the prices of the offer that made it: its one record and its budget settle carry it whether the request then fails,
 * is answered by another offer (whose cost the route adds), or its client leaves first (recorded at once, as a 499).
 */
function billPart(usage: UsageDraft, offer: Offer, part: PaidPart): void {
  usage.promptTokens += part.promptTokens;
  usage.completionTokens += part.completionTokens;
  usage.units += part.units;
  const { prompt_per_1m, completion_per_1m, per_unit } = offer.pricing;
  usage.cost += (part.promptTokens * prompt_per_1m + part.completionTokens * completion_per_1m) / 1_000_000 + part.units * (per_unit ?? 0);
}

function streams(request: FastifyRequest): boolean {
  const body = request.body as { stream?: unknown } | null | undefined;
  return typeof body === 'object' && body !== null && body.stream === true;
}

/**
 * Only the provider's own faults (those that fail over) count against it; a refused request or a client that left says
 * nothing, nor does a refusal of this offer alone (an embedding size the model does not give), which fails over too,
 * nor a timeout a healthy provider could have reached generating the completion asked for ({@link outlastsReadTimeout})
 * while it answered other attempts meanwhile: with none answered (a provider that hangs), it counts as any timeout.
 */
function learnFromFailure(
  stats: OfferStats,
  offer: Offer,
  probe: number,
  err: unknown,
  ms: number,
  mode: LatencyMode,
  completionTokens: number | undefined,
): void {
  if (!providerFault(err) || (outlastsReadTimeout(err, completionTokens) && stats.answeredWithin(offer, ms))) stats.abandoned(offer, probe);
  else stats.record(offer, err.kind === 'timeout' ? 'timeout' : 'error', ms, mode, providerWaitMs(err));
}

/**
 * The slowest generation a healthy provider is taken to keep up, in tokens per second: large models under load run
 * at 20-40, so a completion cap above 20 × the read timeout may take longer than it whatever the provider's health.
 */
const FLOOR_TOKENS_PER_S = 20;

/**
 * A non-streamed answer's headers come only after its whole generation, whose length the client chooses (max_tokens,
 * or the context window): a headers timeout of a call asking for more than the provider generates within its
 * `timeoutMs` at {@link FLOOR_TOKENS_PER_S} says nothing about the provider, and one key's long asks would otherwise
 * open the circuit for every key. A small one that timed out, a stream's (its first chunk does not wait for the
 * length), a connect or body timeout and every other call's (no `completionTokens`) still count.
 */
function outlastsReadTimeout(err: UpstreamError, completionTokens: number | undefined): boolean {
  const waited = err.headersWaitMs;
  return completionTokens !== undefined && waited !== undefined && completionTokens > (waited / 1000) * FLOOR_TOKENS_PER_S;
}

function providerFault(err: unknown): err is UpstreamError {
  return err instanceof UpstreamError && err.retryable && !err.elsewhere;
}

/**
 * A 429 or 503 naming its wait (Retry-After, retry-after-ms, or what an adapter read in its place): the provider asked
 * not to be called until then, and its offer sits out (health.ts caps it). Without one, the failure only counts.
 */
function providerWaitMs(err: UpstreamError): number | undefined {
  const s = err.retryAfterS;
  return (err.status === 429 || err.status === 503) && s !== undefined && s > 0 ? s * 1000 : undefined;
}

/** The client closed the connection before its answer was written whole. */
export function leftBeforeAnswer(res: ServerResponse): boolean {
  return res.closed && !res.writableFinished;
}

/**
 * Aborts upstream work when the client goes away before the answer (unless `whenClientLeaves` is false: a request that
 * outlives its client), or when a shutdown answers the calls still waiting; until disarmed (a stream that started goes on).
 */
export function clientAbortSignal(services: Services, reply: FastifyReply, whenClientLeaves = true): CancelSignal & { disarm(): void } {
  return new ClientGone(reply.raw, services.upstreamCalls, whenClientLeaves);
}

/**
 * The signal of a route's upstream calls: a request with X-Idempotency-Key outlives its client (RequestState's
 * outlivesClient), so that the retry the key was sent for (an SDK's after its timeout) waits for this answer and
 * replays it, rather than find the key released and run the calls again, paid twice; a shutdown still stops it.
 * Disarm it once the calls are over.
 */
export function keyedRequestSignal(services: Services, request: FastifyRequest, reply: FastifyReply): CancelSignal & { disarm(): void } {
  request.gw.outlivesClient = request.headers[H.idempotencyKey] !== undefined;
  return clientAbortSignal(services, reply, !request.gw.outlivesClient);
}

/** `run`'s calls, their signal disarmed once they are over (one that outlives its client is kept until then). */
export async function disarmedAfter<T>(signal: { disarm(): void }, run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } finally {
    signal.disarm();
  }
}

/**
 * The calls this instance has waiting on a provider for an answer not yet begun, so that a shutdown about to run out of
 * time can answer them (app.ts): each one ends with the shutdown's error (a 503 the client retries elsewhere), is
 * recorded, and lets its budget hold go, where the process's exit would have reset its connection with nothing written.
 */
export class UpstreamCalls {
  private readonly waiting = new Set<ClientGone>();
  private cutWith: GatewayError | null = null;

  /** Ends every call still waiting with `reason`, and any started from now on. */
  cut(reason: GatewayError): void {
    this.cutWith = reason;
    const waiting = [...this.waiting];
    this.waiting.clear();
    for (const call of waiting) call.end(reason);
  }

  /** @internal ClientGone's bookkeeping: false when calls are cut already. */
  enter(call: ClientGone): boolean {
    if (this.cutWith) {
      call.end(this.cutWith);
      return false;
    }
    this.waiting.add(call);
    return true;
  }

  /** @internal */
  leave(call: ClientGone): void {
    this.waiting.delete(call);
  }
}

/** The reason of a call whose client left (read for its message only). */
const CLIENT_LEFT = new Error('the client closed the connection');

/**
 * Aborts when the response closes before it finished: the client left.
 * One 'close' listener and a plain list, where an AbortController and an
 * EventTarget listener cost a request about 4 µs in place (CPU profile at
 * 50 ms upstream): most requests are answered, and their signal never fires.
 */
class ClientGone implements CancelSignal {
  aborted = false;
  reason: Error | undefined = undefined;
  private listeners: AbortListener[] = [];
  private armed = true;

  constructor(
    res: ServerResponse,
    private readonly calls: UpstreamCalls,
    whenClientLeaves: boolean,
  ) {
    // A client that left while the request was still being read has closed already: its 'close' has fired.
    if (whenClientLeaves && leftBeforeAnswer(res)) {
      this.end(CLIENT_LEFT);
      return;
    }
    if (!calls.enter(this)) return;
    // A call that outlives its client stays among the waiting calls until its route disarms it (it began, or failed).
    if (!whenClientLeaves) return;
    res.once('close', () => {
      calls.leave(this);
      if (leftBeforeAnswer(res)) this.end(CLIENT_LEFT);
    });
  }

  addEventListener(_type: 'abort', listener: AbortListener): void {
    this.listeners.push(listener);
  }

  removeEventListener(_type: 'abort', listener: AbortListener): void {
    const at = this.listeners.indexOf(listener);
    if (at >= 0) this.listeners.splice(at, 1);
  }

  /** From now on neither the client's leaving nor a shutdown aborts anything (a stream that started: its session goes on). */
  disarm(): void {
    this.armed = false;
    this.listeners = [];
    this.calls.leave(this);
  }

  /** Aborts the call with `reason`: the client left, or (a GatewayError) the shutdown answers it. */
  end(reason: Error): void {
    if (!this.armed || this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    const listeners = this.listeners;
    this.listeners = [];
    for (const listener of listeners) {
      if (typeof listener === 'function') listener();
      else listener.handleEvent();
    }
  }
}

export function setRoutingHeaders(reply: FastifyReply, request: FastifyRequest, offer: Offer, strategy: Strategy, hops: number): void {
  routingHeaders(reply, request, { provider: offer.provider, region: offer.region, strategy, hops });
}

/** The routing headers of an answer (a resumed stream's are those of the request that started it). */
export function routingHeaders(reply: FastifyReply, request: FastifyRequest, routing: StreamRouting): void {
  reply.header(H.provider, routing.provider);
  if (request.gw.variant === 'b') {
    reply.header(H.region, routing.region);
    reply.header(H.strategy, routing.strategy);
    reply.header(H.routingHops, String(routing.hops));
  }
}
