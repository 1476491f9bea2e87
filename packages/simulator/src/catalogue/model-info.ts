/** What the simulator knows about an upstream model name (or guesses from the name). */
import type { ReasoningStyle } from '../types.js';

export type UpstreamKind = 'chat' | 'embedding' | 'rerank' | 'audio';

export interface ModelInfo {
  kind: UpstreamKind;
  ownedBy: string;
  created: number;
  contextLength: number;
  /** Embeddings: native dimension. */
  dim?: number;
  /** Embeddings: whether a smaller `dimensions`/`output_dimension` is honoured. */
  matryoshka?: boolean;
  /** Always reasons (R1-style) on OpenAI-compatible providers. */
  reasoning?: boolean;
  /** Overrides the provider's reasoning style (Scaleway's legacy R1 uses `<think>`). */
  reasoningStyle?: ReasoningStyle;
  /** Mistral: reasons when `reasoning_effort: "high"` or `prompt_mode: "reasoning"`. */
  adjustableReasoning?: boolean;
  vision?: boolean;
  tools?: boolean;
  /** Mistral: other names of the same model. */
  aliases?: string[];
  /** Mistral / Azure: retirement date (ISO). */
  deprecation?: string;
  deprecationReplacement?: string;
  /** Azure: model version a deployment runs (the `model` field of responses). */
  servedModel?: string;
  description?: string;
}

const T0 = 1_727_740_800; // 2024-10-01

const chat = (ownedBy: string, contextLength: number, extra: Partial<ModelInfo> = {}): ModelInfo => ({
  kind: 'chat',
  ownedBy,
  created: T0,
  contextLength,
  tools: true,
  ...extra,
});
const embed = (ownedBy: string, dim: number, matryoshka: boolean): ModelInfo => ({
  kind: 'embedding',
  ownedBy,
  created: T0,
  contextLength: 8192,
  dim,
  matryoshka,
});
const audio = (ownedBy: string): ModelInfo => ({ kind: 'audio', ownedBy, created: T0, contextLength: 0 });

const SMALL_ALIASES = ['mistral-small-2506', 'mistral-small-latest'];
const MEDIUM_ALIASES = ['mistral-medium-2508', 'mistral-medium-latest'];
const LARGE_ALIASES = ['mistral-large-2411', 'mistral-large-latest'];
const VOXTRAL_ALIASES = ['voxtral-mini-2507', 'voxtral-mini-latest'];
const R1 = { reasoning: true, tools: false } as const;

/** Known upstream names (each name belongs to one provider, as in reality). */
export const KNOWN_MODELS: Record<string, ModelInfo> = {
  // Scaleway
  'mistral-small-3.2-24b-instruct-2506': chat('mistral', 128_000, { vision: true }),
  'mistral-nemo-instruct-2407': chat('mistral', 128_000),
  'llama-3.3-70b-instruct': chat('meta', 131_072),
  'deepseek-r1-distill-llama-70b': chat('deepseek', 32_000, { ...R1, reasoningStyle: 'think_tags' }),
  'bge-multilingual-gemma2': embed('baai', 3584, false),
  'whisper-large-v3': audio('openai'),
  'voxtral-mini-3b-2507': audio('mistral'),
  // OVHcloud
  'Mistral-Small-3.2-24B-Instruct-2506': chat('mistral', 128_000, { vision: true }),
  'Meta-Llama-3_3-70B-Instruct': chat('meta', 131_072),
  'Qwen3-32B': chat('qwen', 32_768),
  'DeepSeek-R1-Distill-Llama-70B': chat('deepseek', 131_072, R1),
  'bge-m3': embed('baai', 1024, false),
  // Nebius
  'meta-llama/Llama-3.3-70B-Instruct': chat('meta', 131_072),
  'meta-llama/Llama-3.3-70B-Instruct-fast': chat('meta', 131_072),
  'Qwen/Qwen3-32B': chat('qwen', 40_960),
  'deepseek-ai/DeepSeek-R1-Distill-Llama-70B': chat('deepseek', 131_072, R1),
  'BAAI/bge-m3': embed('baai', 1024, false),
  // Mistral
  'mistral-small-2506': chat('mistralai', 131_072, { vision: true, adjustableReasoning: true, aliases: SMALL_ALIASES }),
  'mistral-small-latest': chat('mistralai', 131_072, { vision: true, adjustableReasoning: true, aliases: SMALL_ALIASES }),
  'mistral-medium-2508': chat('mistralai', 131_072, { vision: true, adjustableReasoning: true, aliases: MEDIUM_ALIASES }),
  'mistral-medium-latest': chat('mistralai', 131_072, { vision: true, adjustableReasoning: true, aliases: MEDIUM_ALIASES }),
  'mistral-large-2411': chat('mistralai', 131_072, { aliases: LARGE_ALIASES }),
  'mistral-large-latest': chat('mistralai', 131_072, { aliases: LARGE_ALIASES }),
  'open-mistral-nemo': chat('mistralai', 131_072, {
    aliases: ['open-mistral-nemo-2407'],
    deprecation: '2025-12-31T12:00:00Z',
    deprecationReplacement: 'mistral-small-latest',
  }),
  'mistral-embed': { ...embed('mistralai', 1024, true), aliases: ['mistral-embed-2312'] },
  'voxtral-mini-2507': { ...audio('mistralai'), aliases: VOXTRAL_ALIASES },
  'voxtral-mini-latest': { ...audio('mistralai'), aliases: VOXTRAL_ALIASES },
  // Azure (deployment names)
  'gpt-4o-mini': chat('system', 128_000, { vision: true, servedModel: 'gpt-4o-mini-2024-07-18' }),
  'text-embedding-3-small': { ...embed('system', 1536, true), servedModel: 'text-embedding-3-small' },
  // Cohere
  'rerank-v3.5': { kind: 'rerank', ownedBy: 'cohere', created: T0, contextLength: 4096 },
  // Cohere's models list: context_length 512 for the v3 embed models, 128k for embed v4.
  'embed-multilingual-v3.0': { ...embed('cohere', 1024, false), contextLength: 512 },
  'embed-v4.0': { ...embed('cohere', 1536, true), contextLength: 128_000 },
  // Chat through its compatibility API only (the gateway does not speak Cohere's native chat).
  'command-a-03-2025': chat('cohere', 256_000),
};

/** Known names first; otherwise guess from the name so that tests can add any model at run time. */
export function modelInfo(name: string): ModelInfo {
  const known = KNOWN_MODELS[name];
  if (known) return known;
  const n = name.toLowerCase();
  if (n.includes('rerank')) return { kind: 'rerank', ownedBy: 'unknown', created: T0, contextLength: 4096 };
  if (n.includes('embed') || n.includes('bge') || n.includes('e5-')) return embed('unknown', 1024, true);
  if (n.includes('whisper') || n.includes('voxtral')) return audio('unknown');
  const reasoning = /(^|[^a-z])(r1|qwq|reason|thinking)/.test(n);
  return chat('unknown', 32_768, reasoning ? { reasoning: true } : { adjustableReasoning: n.includes('mistral') });
}
