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

/** One `chat.completion.chunk` in OpenAI's shape, as adapters hand it to the gateway. */
export interface ChatChunk {
  id: string;
  object: 'chat.completion.chunk';
  created: number;
  model: string;
  /** Empty on the usage chunk. */
  choices: unknown[];
  usage?: TokenUsage | null;
  [extra: string]: unknown;
}

/**
 * An upstream stream that has answered 200. Iterating yields normalised
 * chunks: reasoning under `delta.reasoning_content`, and usage as its own
 * final chunk with `choices: []` (whatever the provider's convention). It
 * ends after the provider's last chunk; an upstream failure mid-stream
 * throws an UpstreamError from the iterator.
 */
export interface ChatStream extends AsyncIterable<ChatChunk> {
  /** Stops reading and closes the upstream connection. */
  abort(): void;
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
  /**
   * Starts a stream; resolves once the provider answered 2xx (so a failed
   * start can still fail over), rejects with an UpstreamError otherwise.
   * Always asks the provider for usage where it can.
   */
  chatStream(body: ChatBody, call: UpstreamCall): Promise<ChatStream>;
  close(): Promise<void>;
}

export type AdapterFactory = (config: ProviderConfig) => ProviderAdapter;
