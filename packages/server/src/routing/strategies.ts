import type { Strategy } from '@gw/schema';
import type { LatencyMode, OfferStatsView } from './offer-stats.js';
import type { Offer } from './registry.js';

export interface RequestSize {
  promptTokens: number;
  maxTokens: number;
  /**
   * Rerank and audio: an offer's most for this request as it is billed (search units or seconds at `per_unit`, or
   * its token prices), which the token formula cannot tell; without it every such offer cost 0 and `cheapest` kept
   * the configured order.
   */
  worstCost?: ((offer: Offer) => number) | undefined;
}

export interface StrategyContext {
  size: RequestSize;
  /** None: nothing is known of any offer (every one counts as healthy and unmeasured). */
  view: OfferStatsView | undefined;
  mode: LatencyMode;
  /** Model and mode: re-measuring is paced per scope. */
  scope: string;
  /** false when a preferred provider goes first anyway: no plan is spent on re-measuring. */
  explore: boolean;
}

/** Expected EUR cost of a request at an offer's prices: prompt tokens at the prompt price plus max_tokens at the completion price. */
export function expectedCost(offer: Offer, size: RequestSize): number {
  if (size.worstCost !== undefined) return size.worstCost(offer);
  return (size.promptTokens * offer.pricing.prompt_per_1m + size.maxTokens * offer.pricing.completion_per_1m) / 1_000_000;
}

/** Orders the healthy offers by the strategy's rule; ties keep the configured order (sorts are stable). */
export function orderOffers(offers: Offer[], strategy: Strategy, ctx: StrategyContext): Offer[] {
  switch (strategy) {
    case 'default':
      return [...offers];
    case 'cheapest':
      return ctx.size.worstCost === undefined
        ? [...offers].sort((x, y) => expectedCost(x, ctx.size) - expectedCost(y, ctx.size))
        : byCost(offers, ctx.size.worstCost);
    case 'fastest':
      return withRemeasure(offers, ctx, (rest) => rest.sort(byLatency(ctx)));
    case 'best':
      return withRemeasure(offers, ctx, (rest) => rest.sort((x, y) => successPercent(y, ctx) - successPercent(x, ctx) || byLatency(ctx)(x, y)));
  }
}

/** Each offer's cost worked out once (a rerank's counts its documents), then sorted by it. */
function byCost(offers: Offer[], cost: (offer: Offer) => number): Offer[] {
  return offers
    .map((offer) => ({ offer, cost: cost(offer) }))
    .sort((x, y) => x.cost - y.cost)
    .map((o) => o.offer);
}

/** Unknown latency sorts after every known one. */
function byLatency(ctx: StrategyContext): (x: Offer, y: Offer) => number {
  const ms = (o: Offer) => ctx.view?.latencyMs(o, ctx.mode) ?? Number.POSITIVE_INFINITY;
  return (x, y) => {
    const a = ms(x);
    const b = ms(y);
    return a === b ? 0 : a < b ? -1 : 1;
  };
}

/** Success rate in whole percent (rates within one percent tie and go to latency); an unmeasured offer counts as 100. */
function successPercent(offer: Offer, ctx: StrategyContext): number {
  return Math.round((ctx.view?.successRate(offer) ?? 1) * 100);
}

/**
 * Moving measures only move for offers that get traffic, so a slower offer
 * would never be seen to recover. Before sorting, one offer may be put
 * first to be measured: one never measured in this mode (once per
 * remeasure period), else, at most once every EXPLORE_EVERY plans, the
 * offer measured longest ago among those unmeasured for the remeasure period.
 */
function withRemeasure(offers: Offer[], ctx: StrategyContext, sort: (rest: Offer[]) => Offer[]): Offer[] {
  const view = ctx.view;
  if (!view || !ctx.explore) return sort([...offers]);
  const turn = view.explorationTurn(ctx.scope);
  const due = offers.filter((o) => view.dueForRemeasure(o, ctx.mode));
  const never = due.find((o) => view.lastMeasuredAt(o, ctx.mode) === Number.NEGATIVE_INFINITY);
  const oldest = turn
    ? due.reduce<Offer | undefined>((a, o) => (a && view.lastMeasuredAt(a, ctx.mode) <= view.lastMeasuredAt(o, ctx.mode) ? a : o), undefined)
    : undefined;
  const first = never ?? oldest;
  if (!first) return sort([...offers]);
  view.markExplored(first, ctx.mode, ctx.scope);
  return [first, ...sort(offers.filter((o) => o !== first))];
}
