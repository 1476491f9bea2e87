/** The demo catalogue: gateway models, which simulated provider offers each, under which name, at what price. */
import type { GatewayFileConfig, ModelConfig, OpenAiVendor, Pricing } from '@gw/schema';
import type { ProviderId } from '../types.js';

const eur = (prompt: number, completion: number, perUnit?: number): Pricing =>
  perUnit === undefined
    ? { prompt_per_1m: prompt, completion_per_1m: completion, currency: 'EUR' }
    : { prompt_per_1m: prompt, completion_per_1m: completion, currency: 'EUR', per_unit: perUnit };

const CHAT = ['streaming', 'tools', 'json'];
const CHAT_VISION = [...CHAT, 'vision'];

/** Gateway models of demo mode. Offers name each provider's own model id. */
export const DEMO_MODELS: ModelConfig[] = [
  {
    id: 'mistral/small',
    kind: 'chat',
    owned_by: 'mistral',
    context_window: 128_000,
    capabilities: CHAT_VISION,
    offers: [
      { provider: 'scaleway', upstreamModel: 'mistral-small-3.2-24b-instruct-2506', pricing: eur(0.15, 0.35) },
      { provider: 'ovh', upstreamModel: 'Mistral-Small-3.2-24B-Instruct-2506', pricing: eur(0.09, 0.28) },
      { provider: 'mistral', upstreamModel: 'mistral-small-latest', pricing: eur(0.1, 0.3) },
    ],
  },
  {
    id: 'mistral/medium',
    kind: 'chat',
    owned_by: 'mistral',
    context_window: 131_072,
    capabilities: [...CHAT_VISION, 'reasoning'],
    offers: [{ provider: 'mistral', upstreamModel: 'mistral-medium-latest', pricing: eur(0.37, 1.85) }],
  },
  {
    id: 'mistral/large',
    kind: 'chat',
    owned_by: 'mistral',
    context_window: 131_072,
    capabilities: CHAT,
    offers: [{ provider: 'mistral', upstreamModel: 'mistral-large-latest', pricing: eur(1.8, 5.4) }],
  },
  {
    id: 'mistral/nemo',
    kind: 'chat',
    owned_by: 'mistral',
    context_window: 128_000,
    capabilities: CHAT,
    deprecated: true,
    offers: [
      { provider: 'mistral', upstreamModel: 'open-mistral-nemo', pricing: eur(0.14, 0.14) },
      { provider: 'scaleway', upstreamModel: 'mistral-nemo-instruct-2407', pricing: eur(0.2, 0.2) },
    ],
  },
  {
    id: 'meta/llama-3.3-70b',
    kind: 'chat',
    owned_by: 'meta',
    context_window: 131_072,
    capabilities: CHAT,
    offers: [
      { provider: 'scaleway', upstreamModel: 'llama-3.3-70b-instruct', pricing: eur(0.8, 0.95) },
      { provider: 'ovh', upstreamModel: 'Meta-Llama-3_3-70B-Instruct', pricing: eur(0.67, 0.67) },
      { provider: 'nebius', upstreamModel: 'meta-llama/Llama-3.3-70B-Instruct', pricing: eur(0.6, 1.2) },
    ],
  },
  {
    id: 'qwen/qwen3-32b',
    kind: 'chat',
    owned_by: 'qwen',
    context_window: 32_768,
    capabilities: CHAT,
    offers: [
      { provider: 'ovh', upstreamModel: 'Qwen3-32B', pricing: eur(0.08, 0.23) },
      { provider: 'nebius', upstreamModel: 'Qwen/Qwen3-32B', pricing: eur(0.1, 0.3) },
    ],
  },
  {
    id: 'deepseek/r1-distill-70b',
    kind: 'chat',
    owned_by: 'deepseek',
    context_window: 131_072,
    capabilities: ['streaming', 'reasoning'],
    offers: [
      { provider: 'ovh', upstreamModel: 'DeepSeek-R1-Distill-Llama-70B', pricing: eur(0.67, 0.67) },
      { provider: 'nebius', upstreamModel: 'deepseek-ai/DeepSeek-R1-Distill-Llama-70B', pricing: eur(0.25, 0.75) },
    ],
  },
  {
    id: 'openai/gpt-4o-mini',
    kind: 'chat',
    owned_by: 'openai',
    context_window: 128_000,
    capabilities: CHAT_VISION,
    offers: [{ provider: 'azure', upstreamModel: 'gpt-4o-mini', pricing: eur(0.15, 0.6) }],
  },
  {
    id: 'mistral/embed',
    kind: 'embedding',
    owned_by: 'mistral',
    context_window: 8192,
    beta: true,
    offers: [{ provider: 'mistral', upstreamModel: 'mistral-embed', pricing: eur(0.1, 0) }],
  },
  {
    id: 'baai/bge-m3',
    kind: 'embedding',
    owned_by: 'baai',
    context_window: 8192,
    beta: true,
    offers: [
      { provider: 'ovh', upstreamModel: 'bge-m3', pricing: eur(0.01, 0) },
      { provider: 'nebius', upstreamModel: 'BAAI/bge-m3', pricing: eur(0.01, 0) },
    ],
  },
  {
    id: 'baai/bge-multilingual-gemma2',
    kind: 'embedding',
    owned_by: 'baai',
    context_window: 8192,
    offers: [{ provider: 'scaleway', upstreamModel: 'bge-multilingual-gemma2', pricing: eur(0.1, 0) }],
  },
  {
    id: 'cohere/embed-multilingual-v3',
    kind: 'embedding',
    owned_by: 'cohere',
    context_window: 512,
    beta: true,
    offers: [{ provider: 'cohere', upstreamModel: 'embed-multilingual-v3.0', pricing: eur(0.1, 0) }],
  },
  {
    id: 'cohere/rerank-v3.5',
    kind: 'rerank',
    owned_by: 'cohere',
    context_window: 4096,
    offers: [{ provider: 'cohere', upstreamModel: 'rerank-v3.5', pricing: eur(0, 0, 0.0019) }],
  },
  {
    id: 'openai/whisper-large-v3',
    kind: 'audio',
    owned_by: 'openai',
    offers: [{ provider: 'scaleway', upstreamModel: 'whisper-large-v3', pricing: eur(0, 0, 0.00005) }],
  },
  {
    id: 'mistral/voxtral-mini',
    kind: 'audio',
    owned_by: 'mistral',
    offers: [
      { provider: 'mistral', upstreamModel: 'voxtral-mini-latest', pricing: eur(0, 0, 0.000017) },
      { provider: 'scaleway', upstreamModel: 'voxtral-mini-3b-2507', pricing: eur(0, 0, 0.00005) },
    ],
  },
];

/** Names a provider lists beyond the demo offers (aliases, variants), as real lists do. */
const EXTRA_MODELS: Partial<Record<ProviderId, string[]>> = {
  mistral: ['mistral-small-2506', 'mistral-medium-2508', 'mistral-large-2411', 'voxtral-mini-2507'],
  nebius: ['meta-llama/Llama-3.3-70B-Instruct-fast'],
  cohere: ['embed-v4.0', 'command-a-03-2025'],
};

/** Default models list of a simulated provider: every upstream name its demo offers use, plus extras. */
export function defaultModels(provider: ProviderId): string[] {
  const names: string[] = [];
  for (const m of DEMO_MODELS) {
    for (const o of m.offers) if (o.provider === provider && !names.includes(o.upstreamModel)) names.push(o.upstreamModel);
  }
  for (const extra of EXTRA_MODELS[provider] ?? []) if (!names.includes(extra)) names.push(extra);
  return names;
}

/** Demo price (EUR per 1M tokens) of an upstream model on a provider, if the catalogue offers it. */
export function demoPricing(provider: string, upstreamModel: string): Pricing | undefined {
  for (const m of DEMO_MODELS) {
    for (const o of m.offers) if (o.provider === provider && o.upstreamModel === upstreamModel) return o.pricing;
  }
  return undefined;
}

export interface DemoProviderRef {
  id: string;
  type: 'openai' | 'mistral' | 'azure' | 'cohere';
  baseUrl: string;
  apiKey: string;
  region: string;
}

/** Which provider each simulated OpenAI-compatible host plays: its address (127.0.0.1) does not tell the gateway. */
const VENDORS: Partial<Record<string, OpenAiVendor>> = { scaleway: 'scaleway', ovh: 'ovhcloud', nebius: 'nebius' };

/** The gateway config (GW_CONFIG shape) for the demo catalogue, pointing at running simulators. */
export function buildDemoConfig(providers: DemoProviderRef[]): GatewayFileConfig {
  const ids = new Set(providers.map((p) => p.id));
  return {
    providers: providers.map((p) => ({
      id: p.id,
      type: p.type,
      baseUrl: p.baseUrl,
      apiKey: p.apiKey,
      region: p.region,
      timeoutMs: 30_000,
      ...(p.type === 'azure' ? { apiVersion: AZURE_API_VERSION } : {}),
      ...(p.type === 'openai' && VENDORS[p.id] !== undefined ? { vendor: VENDORS[p.id] } : {}),
    })),
    models: DEMO_MODELS.map((m) => ({
      ...structuredClone(m),
      offers: m.offers.filter((o) => ids.has(o.provider)).map((o) => structuredClone(o)),
    })).filter((m) => m.offers.length > 0),
  };
}

export const AZURE_API_VERSION = '2024-10-21';
