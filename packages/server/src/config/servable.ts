import { KINDS_BY_PROVIDER_TYPE, type ModelKind, type ProviderConfig } from '@gw/schema';
import { type Vendor, vendorOf } from './vendor.js';

interface Unservable {
  /** What the entry is, as the message names it. */
  is: string;
  /** Why each kind can never work there. */
  kinds: Partial<Record<ModelKind, string>>;
}

/**
 * Kinds a provider behind an `openai`-type entry cannot serve through the OpenAI-compatible adapter, though the type
 * has the call: an offer of one was taken, listed (Cohere's native model list names its rerank and transcription
 * models) and then failed every request, as the provider's 400 blamed on the client or as an outage.
 */
const UNSERVABLE_BY_VENDOR: Partial<Record<Vendor, Unservable>> = {
  // PROVIDERS.md 10.3: the compatibility API serves chat, embeddings and transcriptions only.
  cohere: {
    is: "Cohere's OpenAI compatibility API",
    kinds: {
      rerank: "which has no rerank call (Cohere's rerank is its native API: a provider of type cohere at https://api.cohere.com)",
      // The adapter asks verbose_json with timestamps for every response format, and sends language only when given.
      audio:
        'whose transcriptions answer response_format json only, where the gateway asks verbose_json with timestamps, and require a language, which a request may leave out',
    },
  },
};

/** Why `provider` can never serve a model of `kind`, said after its id (`alpha is …`); null where it can. */
export function unservable(provider: ProviderConfig, kind: ModelKind): string | null {
  const kinds = KINDS_BY_PROVIDER_TYPE[provider.type];
  if (!kinds.includes(kind)) return `of type ${provider.type}, which serves ${kinds.join(', ')}`;
  if (provider.type !== 'openai') return null;
  const rule = UNSERVABLE_BY_VENDOR[vendorOf(provider)];
  const why = rule?.kinds[kind];
  if (rule === undefined || why === undefined) return null;
  return `${rule.is} (${provider.vendor === undefined ? 'told by the host of its baseUrl' : `vendor: ${provider.vendor}`}), ${why}`;
}
