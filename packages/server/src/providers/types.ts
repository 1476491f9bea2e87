import type { ProviderConfig, ProviderType } from '@gw/schema';

export interface TokenUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

/** A chat completion in OpenAI's shape (extra fields pass through). */
export interface ChatCompletion {
  id: string;
  object: 'chat.completion';
  created: number;
  model: string;
  choices: unknown[];
  usage?: TokenUsage;
  [extra: string]: unknown;
}

/** The client's validated chat body; unknown fields are kept so adapters can decide. */
export type ChatBody = Record<string, unknown> & { model: string; messages: unknown[] };

export interface UpstreamCall {
  upstreamModel: string;
  signal: AbortSignal;
  requestId: string;
}

/**
 * One provider behind one wire format. Each adapter maps the gateway's
 * OpenAI-shaped calls onto its provider and the provider's answers,
 * errors and quirks back, so routing treats every provider alike.
 */
export interface ProviderAdapter {
  readonly id: string;
  readonly type: ProviderType;
  readonly region: string;
  /** The upstream model names the provider lists now. */
  listModels(signal?: AbortSignal): Promise<string[]>;
  chat(body: ChatBody, call: UpstreamCall): Promise<ChatCompletion>;
  close(): Promise<void>;
}

export type AdapterFactory = (config: ProviderConfig) => ProviderAdapter;
