import type { ModelKind } from './headers.js';

/** Wire formats the gateway has adapters for. */
export const PROVIDER_TYPES = ['openai', 'mistral', 'azure', 'cohere'] as const;
export type ProviderType = (typeof PROVIDER_TYPES)[number];

/**
 * The providers behind `openai`-type entries whose request rules the gateway knows (PROVIDERS.md 2); `generic` for
 * any other OpenAI-compatible server. Told by the host of `baseUrl`, or by the entry's `vendor` where the host does
 * not say (a proxy, the simulator).
 */
export const OPENAI_VENDORS = ['scaleway', 'ovhcloud', 'ionos', 'nebius', 'cohere', 'vertex', 'generic'] as const;
export type OpenAiVendor = (typeof OPENAI_VENDORS)[number];

/** What each provider type's adapter serves: a model offered by a provider of another type is refused at start. */
export const KINDS_BY_PROVIDER_TYPE: Readonly<Record<ProviderType, readonly ModelKind[]>> = {
  openai: ['chat', 'embedding', 'rerank', 'audio'],
  mistral: ['chat', 'embedding', 'audio'],
  azure: ['chat', 'embedding'],
  cohere: ['embedding', 'rerank'],
};

export interface Pricing {
  prompt_per_1m: number;
  completion_per_1m: number;
  currency: string;
  /** Per-unit prices for non-token kinds (rerank search units, audio seconds). */
  per_unit?: number;
}

export interface ProviderConfig {
  id: string;
  type: ProviderType;
  baseUrl: string;
  apiKey?: string;
  region: string;
  /** Upstream read timeout: the longest wait for the response headers, and between two body chunks. */
  timeoutMs?: number;
  /** Upstream connect timeout (TCP and TLS); default: the read timeout, at most 10 s. */
  connectTimeoutMs?: number;
  /** Azure: api-version query parameter. */
  apiVersion?: string;
  /** `openai` type: which provider this is, where the host of `baseUrl` does not say. */
  vendor?: OpenAiVendor;
}

export interface OfferConfig {
  provider: string;
  upstreamModel: string;
  pricing: Pricing;
}

export interface ModelConfig {
  id: string;
  kind: ModelKind;
  owned_by: string;
  context_window?: number;
  capabilities?: string[];
  deprecated?: boolean;
  beta?: boolean;
  offers: OfferConfig[];
}

/** The `GW_CONFIG` file (INTERFACES.md), after `${ENV}` substitution. */
export interface GatewayFileConfig {
  providers: ProviderConfig[];
  models: ModelConfig[];
}
