/** @gw/simulator: simulated EU AI providers speaking their real wire formats, with fault controls. */
import type { GatewayFileConfig } from '@gw/schema';
import { buildDemoConfig } from './catalogue/demo.js';
import { ProviderServer } from './core/server.js';
import { providerDef } from './providers.js';
import { type Fault, PROVIDER_IDS, type ProviderId, type ProviderSettings, type ProviderStats, type WireType } from './types.js';

export { AZURE_API_VERSION, buildDemoConfig, DEMO_MODELS, defaultModels } from './catalogue/demo.js';
export { KNOWN_MODELS, type ModelInfo, modelInfo } from './catalogue/model-info.js';
export { DEMO_API_KEYS, PROFILES } from './providers.js';
export type * from './types.js';
export { ENDPOINTS, PROVIDER_IDS } from './types.js';

export interface SimulatedProvider {
  id: string;
  type: 'openai' | 'mistral' | 'azure' | 'cohere';
  region: string;
  apiKey: string;
  /** Origin, e.g. http://127.0.0.1:PORT */
  url: string;
  /** What a gateway config's `baseUrl` should be: `${url}/v1`, or the origin for azure and cohere. */
  baseUrl: string;
  /** Replaces any current fault. */
  setFault(fault: Fault): void;
  clearFaults(): void;
  /** The current fault (null when none or used up). */
  fault(): Fault | null;
  /** What its models list names (Azure: deployment names). */
  setModels(upstreamModelIds: string[]): void;
  models(): string[];
  stats(): ProviderStats;
  resetStats(): void;
  /** Change timing / reasoning style / Azure async filter at run time. */
  configure(settings: Partial<ProviderSettings>): void;
  settings(): ProviderSettings;
  /** Clear faults and stats, restore default models and settings. */
  reset(): void;
}

export interface Simulator {
  providers: Record<string, SimulatedProvider>;
  /** The demo catalogue as a gateway config object (the GW_CONFIG file shape), pointing at these servers. */
  demoConfig(): GatewayFileConfig;
  /** `reset()` on every provider. */
  reset(): void;
  close(): Promise<void>;
}

export interface SimulatorOptions {
  host?: string;
  /** 0 (default) = random free ports; otherwise providers listen on basePort + index in PROVIDER_IDS order. */
  basePort?: number;
  /** Multiplies the default latencies; 0 = no added latency. Default 1. */
  latencyScale?: number;
  /** Start only these providers (default: all six). */
  only?: ProviderId[];
  /** Override the demo API keys. */
  apiKeys?: Partial<Record<ProviderId, string>>;
}

function facade(s: ProviderServer): SimulatedProvider {
  return {
    id: s.id,
    type: s.type satisfies WireType,
    region: s.region,
    apiKey: s.apiKey,
    url: s.url,
    baseUrl: s.baseUrl,
    setFault: (f) => s.faults.set(f),
    clearFaults: () => s.faults.clear(),
    fault: () => s.faults.get(),
    setModels: (ids) => s.setModels(ids),
    models: () => s.models(),
    stats: () => s.stats.snapshot(),
    resetStats: () => s.stats.reset(),
    configure: (settings) => s.configure(settings),
    settings: () => ({ ...s.settings }),
    reset: () => s.reset(),
  };
}

export async function startSimulator(options: SimulatorOptions = {}): Promise<Simulator> {
  const host = options.host ?? '127.0.0.1';
  const basePort = options.basePort ?? 0;
  const latencyScale = options.latencyScale ?? 1;
  const ids = PROVIDER_IDS.filter((id) => options.only === undefined || options.only.includes(id));
  const servers: ProviderServer[] = [];
  try {
    for (const id of ids) {
      const server = new ProviderServer(providerDef(id, { latencyScale, apiKey: options.apiKeys?.[id] }), host);
      await server.listen(basePort === 0 ? 0 : basePort + PROVIDER_IDS.indexOf(id));
      servers.push(server);
    }
  } catch (err) {
    await Promise.all(servers.map((s) => s.close()));
    throw err;
  }
  const providers: Record<string, SimulatedProvider> = {};
  for (const s of servers) providers[s.id] = facade(s);
  return {
    providers,
    demoConfig: () => buildDemoConfig(servers.map((s) => ({ id: s.id, type: s.type, baseUrl: s.baseUrl, apiKey: s.apiKey, region: s.region }))),
    reset: () => {
      for (const s of servers) s.reset();
    },
    close: async () => {
      await Promise.all(servers.map((s) => s.close()));
    },
  };
}
