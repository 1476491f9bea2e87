import { MAX_PROVIDER_TOKENS } from './provider-usage.js';

/**
 * A provider's token count, when it is one (a count of 0 is none: no input costs nothing, so the gateway's estimate
 * stands), whole and at most what the store's columns hold.
 */
export function tokenCount(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) && value > 0 ? Math.min(MAX_PROVIDER_TOKENS, Math.ceil(value)) : null;
}
