import type { Strategy } from '@gw/schema';
import { GatewayError } from '../errors/gateway-error.js';
import type { OfferStatsView } from './offer-stats.js';
import { LIST_RETRY_FIRST_S, type Offer, type RegistryModel } from './registry.js';
import { orderOffers, type RequestSize } from './strategies.js';

export { expectedCost, type RequestSize } from './strategies.js';

export interface RouteOptions {
  strategy: Strategy;
  /** X-Gateway-Provider: only this provider, no failover. */
  pin: string | null;
  /** X-Gateway-Provider-Prefer: this provider first, then the rest. */
  prefer: string | null;
  /** Failover hops allowed after the first offer. */
  maxHops: number;
  /** What this instance knows of each offer's health and speed; none: every offer is healthy and unmeasured. */
  stats?: OfferStatsView | undefined;
  /** The request streams: `fastest` compares time to first token rather than total time. */
  stream?: boolean | undefined;
}

/**
 * Orders a model's offers into the plan the request walks: offers whose
 * circuit is open are left out; a pin keeps its one offer; otherwise the
 * strategy orders the rest and a preferred provider goes first. The walk
 * makes at most the first attempt plus `maxHops` failovers
 * ({@link heldCost}); the offers after those stand in for one that leaves
 * the plans while the request runs, which spends no hop.
 */
export function planOffers(model: RegistryModel, options: RouteOptions, size: RequestSize): Offer[] {
  const view = options.stats;
  const healthy = (o: Offer) => view?.available(o) ?? true;
  if (options.pin !== null) {
    const pinned = model.offers.filter((o) => o.provider === options.pin);
    if (pinned.length === 0) {
      if (model.unread?.includes(options.pin)) {
        // Unreachable since the gateway started, so whether it lists the model is not known: an outage, retried as one.
        throw new GatewayError(
          'no_healthy_provider',
          `Provider '${options.pin}' cannot be reached right now: its model list could not be read since the gateway started.`,
          { retryAfterS: LIST_RETRY_FIRST_S },
        );
      }
      throw new GatewayError('provider_unsupported', `Provider '${options.pin}' does not serve model '${model.id}'.`, { param: 'X-Gateway-Provider' });
    }
    const usable = pinned.filter(healthy);
    if (usable.length === 0) throw noHealthyOffer(model, pinned, view);
    return usable.slice(0, 1);
  }
  const candidates = model.offers.filter(healthy);
  if (candidates.length === 0) throw noHealthyOffer(model, model.offers, view);
  const mode = options.stream === true ? 'stream' : 'full';
  let offers = orderOffers(candidates, options.strategy, { size, view, mode, scope: `${mode}|${model.id}`, explore: options.prefer === null });
  if (options.prefer !== null) {
    const preferred = offers.filter((o) => o.provider === options.prefer);
    offers = [...preferred, ...offers.filter((o) => o.provider !== options.prefer)];
  }
  return offers;
}

/** The offers a plan's walk attempts unless one of them leaves the plans meanwhile: the first plus `maxHops`. */
export function heldOffers(plan: Offer[], maxHops: number): Offer[] {
  return plan.length > maxHops + 1 ? plan.slice(0, maxHops + 1) : plan;
}

/**
 * What the budget holds for a plan: the dearest of its {@link heldOffers}, without making their list. An offer after
 * them is tried in place of one skipped only if this covers it (routing/execute.ts).
 */
export function heldCost(plan: readonly Offer[], maxHops: number, cost: (offer: Offer) => number): number {
  let most = 0;
  for (let i = 0; i < plan.length && i <= maxHops; i++) most = Math.max(most, cost(plan[i] as Offer));
  return most;
}

/**
 * The wait of a 503 whose offers are each half-open with a probe in flight: it ends when its request does, which is not
 * known. Said as 0 (retry-after-ms beside Retry-After: 1), the OpenAI and AI SDKs retried at once into the same 503.
 */
const PROBE_WAIT_MS = 1000;

/** Every offer's circuit is open: 503, retry once the first of them lets a probe through. */
function noHealthyOffer(model: RegistryModel, offers: Offer[], view: OfferStatsView | undefined): GatewayError {
  const waitMs = Math.min(...offers.map((o) => view?.remainingMs(o) ?? 0)) || PROBE_WAIT_MS;
  const providers = [...new Set(offers.map((o) => o.provider))];
  const paused = `${providers.join(', ')} ${providers.length === 1 ? 'failed recently and is' : 'failed recently and are'} paused`;
  return new GatewayError('no_healthy_provider', `No provider of '${model.id}' is healthy right now (${paused}).`, {
    retryAfterMs: waitMs,
  });
}
