import type { ProviderConfig } from '@gw/schema';
import { AzureOpenAIAdapter } from './azure/index.js';
import { CohereAdapter } from './cohere/index.js';
import { MistralAdapter } from './mistral/index.js';
import { OpenAICompatibleAdapter } from './openai-compatible/index.js';
import type { ProviderAdapter } from './types.js';

export type { ChatBody, ChatCompletion, ProviderAdapter, TokenUsage, UpstreamCall } from './types.js';

/** One adapter per configured provider, chosen by its wire type. */
export function createAdapter(config: ProviderConfig): ProviderAdapter {
  switch (config.type) {
    case 'openai':
      return new OpenAICompatibleAdapter(config);
    case 'mistral':
      return new MistralAdapter(config);
    case 'azure':
      return new AzureOpenAIAdapter(config);
    case 'cohere':
      return new CohereAdapter(config);
  }
}
