import type { ApiKeyAuthenticator } from '../auth/api-keys.js';
import type { GatewayConfig } from '../config/index.js';
import type { WorkspaceCache } from '../auth/workspace-cache.js';
import type { UsageWriter } from '../jobs/usage-writer.js';
import type { BudgetLedger } from '../limits/budget-types.js';
import type { RateLimiter } from '../limits/types.js';
import type { ProviderAdapter } from '../providers/types.js';
import type { ModelRegistry } from '../routing/registry.js';
import type { Store } from '../store/types.js';
import type { Metrics } from './metrics.js';

/** Everything the HTTP layer needs, built by app.ts. */
export interface Services {
  config: GatewayConfig;
  version: string;
  store: Store;
  registry: ModelRegistry;
  adapters: ReadonlyMap<string, ProviderAdapter>;
  auth: ApiKeyAuthenticator;
  workspaces: WorkspaceCache;
  usage: UsageWriter;
  limiter: RateLimiter;
  ledger: BudgetLedger;
  metrics: Metrics;
  lifecycle: { draining: boolean };
}
