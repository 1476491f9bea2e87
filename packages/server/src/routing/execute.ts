import { GatewayError } from '../errors/gateway-error.js';
import { AnswerOverBound } from '../errors/out-of-resources.js';
import { UpstreamError } from '../errors/upstream-error.js';
import type { OfferStatsView } from './offer-stats.js';
import { heldCost } from './plan.js';
import type { Offer } from './registry.js';

export interface Attempt {
  provider: string;
  ok: boolean;
  error?: string;
  ms: number;
}

export interface PlanResult<T> {
  value: T;
  offer: Offer;
  /** Failover hops used: attempts after the first. */
  hops: number;
  attempts: Attempt[];
}

export interface PlanWalk {
  /**
   * Asked again before each offer after a failure: one that left the plans since this one was made (its circuit
   * opened, its provider asked to wait, another request probes it) is skipped, as a plan made now would.
   */
  health?: Pick<OfferStatsView, 'available' | 'remainingMs'>;
  /** Asked before each offer after a failure; false ends the walk there with that failure. */
  mayFailOver?: () => Promise<boolean>;
  /**
   * Every offer the plan was made from (the model's, those a request's fields left in; default the plan), read only
   * when all failed, to say when the first of them is back.
   */
  offers?: readonly Offer[];
  /** X-Gateway-Provider: a retry can only be served by this provider's offers, so only their return counts. */
  pin?: string | null;
  /** X-Gateway-Max-Hops: attempts after the first (default: every offer of the plan). A skipped offer spends none. */
  maxHops?: number;
  /**
   * What the budget holds for an offer, the dearest of the first `maxHops + 1` being held: an offer after them, reached
   * because one before was skipped, is tried only if the hold covers it.
   */
  cost?: (offer: Offer) => number;
}

/**
 * Walks the plan: each offer in turn until one answers. Only provider
 * faults (connect, timeout, 5xx, 429), a body over one host's size
 * limit (413) and this instance's own want of a connection (503
 * `out_of_resources`: another provider may have one kept alive) move on;
 * a request the provider refuses as invalid is the client's error and is
 * not retried elsewhere.
 */
export async function executePlan<T>(plan: Offer[], call: (offer: Offer) => Promise<T>, walk: PlanWalk = {}): Promise<PlanResult<T>> {
  const { health, mayFailOver, offers = plan, pin = null, cost } = walk;
  if (plan.length === 0) throw new GatewayError('no_healthy_provider', 'No EU provider is available for this model right now.', { retryAfterS: 5 });
  const limit = walk.maxHops === undefined ? plan.length : walk.maxHops + 1;
  const attempts: Attempt[] = [];
  let lastError: UpstreamError | null = null;
  // The instance's own shortage (no descriptor for a new connection): the next offer may have one kept alive.
  let shortage: GatewayError | null = null;
  let skipped = false;
  for (let i = 0; i < plan.length && attempts.length < limit; i++) {
    const offer = plan[i] as Offer;
    if (lastError !== null || shortage !== null) {
      // The plan predates the first attempt: an offer that left the plans since (its circuit opened, its provider asked
      // to wait, another request probes it) is skipped, no hop spent on it: the next offer takes its place.
      if (health !== undefined && !health.available(offer)) {
        skipped = true;
        continue;
      }
      // In the place of a skipped one, an offer the budget's hold (the dearest of the first `limit`) does not cover is not tried.
      if (i >= limit && cost !== undefined && cost(offer) > heldCost(plan, limit - 1, cost)) continue;
      // The request ends with the last failure when the next offer may not be tried (a budget that cannot hold it).
      if (mayFailOver && !(await mayFailOver())) break;
    }
    const started = performance.now();
    try {
      const value = await call(offer);
      const attempt = { provider: offer.provider, ok: true, ms: performance.now() - started };
      attempts.push(attempt);
      return { value, offer, hops: attempts.length - 1, attempts };
    } catch (caught) {
      // An answer over the instance's memory bound is not asked of another provider: its answer would be as large.
      if (caught instanceof GatewayError && caught.code === 'out_of_resources' && !(caught instanceof AnswerOverBound)) {
        attempts.push({ provider: offer.provider, ok: false, error: caught.message, ms: performance.now() - started });
        shortage = caught;
        continue;
      }
      if (!(caught instanceof UpstreamError)) throw caught;
      shortage = null;
      const err = tooLargeHereOnly(caught);
      const attempt = { provider: offer.provider, ok: false, error: err.message, ms: performance.now() - started };
      attempts.push(attempt);
      if (err.clientFault) throw refusedByProvider(err);
      // Not the client's fault and not worth another provider (an odd status, a client that left): the provider failed this request.
      if (!err.retryable) throw finalError(attempts, err);
      lastError = err;
    }
  }
  // The last attempt found no descriptor: that, not an earlier provider's failure, is what a retry waits for.
  if (shortage !== null) throw shortage;
  // Every offer the request could use may be out now (skipped ones, tried ones whose circuit opened, those out when it
  // planned): a retry before the first is back finds none, and the OpenAI SDK's own backoff would spend it on a 503.
  // A last provider's own wait is passed on as it said it, unless an offer it did not ask for was skipped.
  const backIn = health !== undefined && (skipped || lastError?.retryAfterS === undefined) ? soonestBack(offers, health, pin) : undefined;
  throw finalError(attempts, lastError, backIn);
}

/**
 * When the first of `offers` is back in the plans, in ms, once every one is out (an open circuit, a provider's wait):
 * a request retried before then finds none of them. Undefined when that is not known: one is in the plans already (a
 * retry may be served at once), or it waits on another request's probe, which ends when that request does.
 */
function soonestBack(offers: readonly Offer[], health: Pick<OfferStatsView, 'available' | 'remainingMs'>, pin: string | null): number | undefined {
  let soonest = Number.POSITIVE_INFINITY;
  for (const offer of offers) {
    if (pin !== null && offer.provider !== pin) continue;
    if (health.available(offer)) return undefined;
    const ms = health.remainingMs(offer);
    if (ms <= 0) return undefined;
    soonest = Math.min(soonest, ms);
  }
  return Number.isFinite(soonest) ? soonest : undefined;
}

/**
 * A provider's 413 is the body over that host's own size limit (OVHcloud's 2 MB JSON payloads, Scaleway's 25 MB
 * files), which other hosts of the model set higher: the next offer is tried, where a 400 or 422 (the request itself)
 * ends the request. callUpstream saw a refusal, so the offer's health does not count it.
 */
function tooLargeHereOnly(err: UpstreamError): UpstreamError {
  return err.kind === 'http' && err.status === 413 && !err.elsewhere ? err.refusedHereOnly() : err;
}

/** `backInMs`: when the first offer the request could use is back, where that is known (soonestBack). */
function finalError(attempts: Attempt[], last: UpstreamError | null, backInMs?: number): GatewayError {
  // The last offer refused the request as the others before it may have (a file over every host's size limit): the
  // client's error, as a provider's refusal is without failover.
  if (last?.elsewhere && last.kind === 'http' && last.status !== undefined && last.status < 500) return refusedByProvider(last);
  const tried = attempts.map((a) => a.provider).join(', ');
  if (last?.kind === 'timeout') {
    // A timeout that left every offer out (its circuit opened) says when the first is back, as the 502 does: the SDK's
    // own backoff spent the retry SPEC asks for after a 504 on the 503 of the open circuit.
    const wait = backInMs === undefined ? {} : { retryAfterMs: backInMs };
    return new GatewayError('upstream_timeout', `The upstream provider did not answer in time (tried: ${tried}).`, { cause: last, ...wait });
  }
  // The provider's own wait, when it gave one (a 503 while it is overloaded too); a 429 always tells the client to wait.
  const retryAfterS = last?.retryAfterS ?? (last?.status === 429 ? 1 : undefined);
  // Every offer the request could use out of the plans: the wait is when the first is back (a provider's own wait
  // included, which keeps its offer out that long), exact to the ms as the open-circuit 503's.
  const wait = backInMs !== undefined ? { retryAfterMs: backInMs } : retryAfterS === undefined ? {} : { retryAfterS };
  return new GatewayError(
    'upstream_failed',
    `Every provider failed for this request (tried: ${tried}); last error: ${withoutFinalDots(last?.message ?? 'unknown')}.`,
    { cause: last, ...wait },
  );
}

function refusedByProvider(err: UpstreamError): GatewayError {
  return new GatewayError('validation', `The provider rejected the request: ${err.message}`, { cause: err, param: err.param });
}

/** The message without the full stops it ends with (the sentence gets its own), in one pass: a regex such as /\.+$/ retries from every dot. */
function withoutFinalDots(message: string): string {
  let end = message.length;
  while (end > 0 && message[end - 1] === '.') end--;
  return message.slice(0, end);
}
