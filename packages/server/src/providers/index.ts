import type { ProviderConfig } from '@gw/schema';
import { OpenAICompatibleAdapter } from './openai-compatible/index.js';
import type { ProviderAdapter } from './types.js';

export type { ChatBody, ChatCompletion, ProviderAdapter, TokenUsage, UpstreamCall } from './types.js';

/** One adapter per configured provider, chosen by its wire type. */
export function createAdapter(config: ProviderConfig): ProviderAdapter | null {
  switch (config.type) {
    case 'openai':
      return new OpenAICompatibleAdapter(config);
    case 'mistral':
    case 'azure':
    case 'cohere':
      return null;
  }
}
