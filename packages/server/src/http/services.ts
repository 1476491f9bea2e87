import type { ApiKeyAuthenticator } from '../auth/api-keys.js';
import type { WorkspaceCache } from '../auth/workspace-cache.js';
import type { GatewayConfig } from '../config/index.js';
import type { UsageWriter } from '../jobs/usage-writer.js';
import type { BetaQuota } from '../limits/beta-quota.js';
import type { BudgetLedger } from '../limits/budget-types.js';
import type { RateLimiter } from '../limits/types.js';
import type { ProviderAdapter } from '../providers/types.js';
import type { IdempotencyService } from '../routing/idempotency.js';
import type { KeptAnswerAllowance } from '../routing/kept-answers.js';
import type { OfferStats } from '../routing/offer-stats.js';
import type { ModelRegistry, RebuildReport } from '../routing/registry.js';
import type { DbClock } from '../store/db-clock.js';
import type { StorePresence } from '../store/presence.js';
import type { Store } from '../store/types.js';
import type { StreamSessions } from '../streaming/sessions.js';
import type { StreamStore } from '../streaming/types.js';
import type { BodyMemory } from './body-memory.js';
import type { Metrics } from './metrics.js';
import type { UpstreamCalls } from './upstream-call.js';

/** Everything the HTTP layer needs, built by app.ts. */
export interface Services {
  config: GatewayConfig;
  version: string;
  /** The root secret (GW_SECRET, else generated on the first start and kept in the store): the key of what the gateway signs. */
  secret: string;
  store: Store;
  registry: ModelRegistry;
  /** The admin API's rebuild: this instance's, and every other instance sharing Redis told to rebuild too. */
  rebuildRegistry(): Promise<RebuildReport>;
  adapters: ReadonlyMap<string, ProviderAdapter>;
  auth: ApiKeyAuthenticator;
  workspaces: WorkspaceCache;
  usage: UsageWriter;
  /** The database's clock, which usage records are stamped with (store/db-clock.ts). */
  dbClock: DbClock;
  limiter: RateLimiter;
  ledger: BudgetLedger;
  /** Variant B's embeddings beta allowance per workspace (Redis-shared when Redis is configured). */
  betaQuota: BetaQuota;
  streams: StreamStore;
  sessions: StreamSessions;
  metrics: Metrics;
  /** Circuits and moving latency/success measures per offer (shared over Redis when configured). */
  offerStats: OfferStats;
  /** X-Idempotency-Key claims and stored answers (Redis when configured, else the store). */
  idempotency: IdempotencyService;
  /** GW_IDEMPOTENCY_KEPT_MB, per API key: one for both variants (and Cohere's v2 path), not one each. */
  keptAnswers: KeptAnswerAllowance;
  /** Instances sharing PostgreSQL without Redis: this one's name and word that it is alive there (null otherwise). */
  storePresence: StorePresence | null;
  /**
   * `inFlight`: requests whose response has not closed yet; `claimsHeld`: X-Idempotency-Key claims not yet settled or
   * released, which a keyed request keeps after its client leaves (it runs on for the retry); `apiRequests`: requests
   * to the public API (either variant) so far. A shutdown waits for the first two.
   */
  lifecycle: { draining: boolean; inFlight: number; claimsHeld: number; apiRequests: number };
  /** The JSON request bodies held (GW_BODY_MEMORY_MB). */
  bodyMemory: BodyMemory;
  /** The calls waiting on a provider for an answer not yet begun: a shutdown about to run out of time answers them. */
  upstreamCalls: UpstreamCalls;
  /** Whether Redis answers (null: no Redis configured): /readyz and `gw_redis_up` tell operators when limits go unenforced. */
  redisHealth: { reachable: boolean; answers(): Promise<boolean> } | null;
}
