/** Header names of the public interface, lower-cased as Node sees them. */
export const H = {
  authorization: 'authorization',
  requestId: 'x-request-id',
  strategy: 'x-gateway-strategy',
  provider: 'x-gateway-provider',
  providerPrefer: 'x-gateway-provider-prefer',
  maxHops: 'x-gateway-max-hops',
  region: 'x-gateway-region',
  routingHops: 'x-gateway-routing-hops',
  idempotencyKey: 'x-idempotency-key',
  /** The IETF draft's and Stripe's name for it, taken as the same header. */
  idempotencyKeyStandard: 'idempotency-key',
  idempotentReplayed: 'idempotent-replayed',
  lastEventId: 'last-event-id',
  rateLimitLimit: 'x-ratelimit-limit',
  rateLimitRemaining: 'x-ratelimit-remaining',
  rateLimitReset: 'x-ratelimit-reset',
  rateLimitEnforced: 'x-ratelimit-enforced',
  retryAfter: 'retry-after',
  /** The same wait in ms, which the OpenAI SDKs read before Retry-After's whole seconds. */
  retryAfterMs: 'retry-after-ms',
  shouldRetry: 'x-should-retry',
  accelBuffering: 'x-accel-buffering',
  serverTiming: 'server-timing',
} as const;

export const STRATEGIES = ['default', 'cheapest', 'fastest', 'best'] as const;
export type Strategy = (typeof STRATEGIES)[number];

export const MODEL_KINDS = ['chat', 'embedding', 'rerank', 'audio'] as const;
export type ModelKind = (typeof MODEL_KINDS)[number];

export const KEY_PREFIX = 'gw_live_';
