import type { Strategy } from '@gw/schema';
import { GatewayError } from '../errors/gateway-error.js';
import type { Offer, RegistryModel } from './registry.js';

export interface RouteOptions {
  strategy: Strategy;
  /** X-Gateway-Provider: only this provider, no failover. */
  pin: string | null;
  /** X-Gateway-Provider-Prefer: this provider first, then the rest. */
  prefer: string | null;
  /** Failover hops allowed after the first offer. */
  maxHops: number;
}

export interface RequestSize {
  promptTokens: number;
  maxTokens: number;
}

/** Expected EUR cost of a request at an offer's prices. */
export function expectedCost(offer: Offer, size: RequestSize): number {
  return (size.promptTokens * offer.pricing.prompt_per_1m + size.maxTokens * offer.pricing.completion_per_1m) / 1_000_000;
}

/** Orders a model's offers into the plan the request walks. */
export function planOffers(model: RegistryModel, options: RouteOptions, size: RequestSize): Offer[] {
  if (options.pin !== null) {
    const pinned = model.offers.filter((o) => o.provider === options.pin);
    if (pinned.length === 0) {
      throw new GatewayError('provider_unsupported', `Provider '${options.pin}' does not serve model '${model.id}'.`, { param: 'X-Gateway-Provider' });
    }
    return pinned;
  }
  let offers = [...model.offers];
  if (options.strategy === 'cheapest') {
    offers.sort((x, y) => expectedCost(x, size) - expectedCost(y, size));
  }
  if (options.prefer !== null) {
    const preferred = offers.filter((o) => o.provider === options.prefer);
    offers = [...preferred, ...offers.filter((o) => o.provider !== options.prefer)];
  }
  return offers.slice(0, options.maxHops + 1);
}
