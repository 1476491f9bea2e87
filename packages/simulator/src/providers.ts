/** The six simulated providers: identity, wire format, default key and speed. */
import { defaultModels } from './catalogue/demo.js';
import type { ProviderDef } from './core/server.js';
import type { ProviderId, ProviderSettings, WireType } from './types.js';
import { azureWire } from './wire/azure.js';
import { cohereWire } from './wire/cohere.js';
import { mistralWire } from './wire/mistral.js';
import { openaiWire } from './wire/openai.js';
import type { Wire } from './wire/types.js';

/** Fixed demo API keys, one per provider (what the demo config sends). */
export const DEMO_API_KEYS: Record<ProviderId, string> = {
  scaleway: 'sim-scaleway-5f0c2b7e-demo-key',
  ovh: 'sim-ovh-ai-endpoints-demo-token',
  nebius: 'sim-nebius-v1.demo-key',
  mistral: 'simMistralDemoKey0123456789abcdef',
  azure: '5a1d0c0ffee0demo0azure0key0000001',
  cohere: 'sim-cohere-demo-key-0123456789abcdefghij',
};

interface Profile {
  type: WireType;
  region: string;
  /** Path of `baseUrl` below the origin. */
  basePath: string;
  wire: () => Wire;
  /** Unscaled default timing in ms: latency before headers, time to first token, gap between chunks. */
  timing: [number, number, number];
  reasoningStyle: ProviderSettings['reasoningStyle'];
}

/** Defaults differ so that strategies see different speeds: nebius fastest, ovh slowest. */
export const PROFILES: Record<ProviderId, Profile> = {
  scaleway: { type: 'openai', region: 'fr-par', basePath: '/v1', wire: () => openaiWire('scaleway'), timing: [20, 25, 4], reasoningStyle: 'split' },
  ovh: { type: 'openai', region: 'fr-gra', basePath: '/v1', wire: () => openaiWire('ovh'), timing: [35, 40, 6], reasoningStyle: 'reasoning_content' },
  nebius: { type: 'openai', region: 'eu-north1', basePath: '/v1', wire: () => openaiWire('nebius'), timing: [8, 10, 2], reasoningStyle: 'reasoning' },
  mistral: { type: 'mistral', region: 'eu-west', basePath: '/v1', wire: mistralWire, timing: [12, 15, 3], reasoningStyle: 'reasoning_content' },
  azure: { type: 'azure', region: 'swedencentral', basePath: '', wire: azureWire, timing: [25, 30, 3], reasoningStyle: 'reasoning_content' },
  cohere: { type: 'cohere', region: 'eu', basePath: '', wire: cohereWire, timing: [10, 5, 0], reasoningStyle: 'reasoning_content' },
};

export function providerDef(id: ProviderId, opts: { latencyScale: number; apiKey?: string | undefined }): ProviderDef {
  const p = PROFILES[id];
  const scale = (ms: number): number => Math.round(ms * opts.latencyScale);
  return {
    id,
    type: p.type,
    region: p.region,
    apiKey: opts.apiKey ?? DEMO_API_KEYS[id],
    basePath: p.basePath,
    wire: p.wire(),
    models: defaultModels(id),
    settings: {
      latencyMs: scale(p.timing[0]),
      ttftMs: scale(p.timing[1]),
      chunkGapMs: scale(p.timing[2]),
      reasoningStyle: p.reasoningStyle,
      asyncContentFilter: id === 'azure',
      answerTokens: null,
      toolCallFragments: false,
    },
  };
}
