import type { ProviderConfig, ProviderType } from '@gw/schema';
import type { Vendor } from '../config/vendor.js';
import type { AnswerMemory, CancelSignal } from './http-client.js';
import type { DimensionsSupport } from './param-compat.js';

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

/** Where a relayed stream's chunks go, as they arrive; `end` comes once, with the failure or null. Never throws. */
export interface ChunkSink {
  chunk(c: ChatChunk): void;
  end(error: Error | null): void;
  /**
   * Bytes the upstream reader holds of an event not yet ended, told only past {@link UNFINISHED_COUNTED_BYTES}
   * (then again as it grows, and 0 once an event ends), so that the instance's stream memory bound counts them.
   */
  unfinished?(bytes: number): void;
}

/** An unfinished event smaller than this is not told to the sink: a well-formed stream never reaches it. */
export const UNFINISHED_COUNTED_BYTES = 64 * 1024;

/**
 * An upstream stream that has answered 200, yielding normalised chunks:
 * reasoning under `delta.reasoning_content`, and usage as its own final
 * chunk with `choices: []` (whatever the provider's convention). It ends
 * after the provider's last chunk; an upstream failure mid-stream ends it
 * with an UpstreamError. Read it once, either pushed (`relay`, the
 * gateway's own path) or by iterating.
 */
export interface ChatStream extends AsyncIterable<ChatChunk> {
  /** Pushes every chunk to `sink` as it arrives, then the end. */
  relay(sink: ChunkSink): void;
  /** Stops reading and closes the upstream connection. */
  abort(): void;
}

/** The client's validated chat body; unknown fields are kept so adapters can decide. */
export type ChatBody = Record<string, unknown> & { model: string; messages: unknown[] };

export interface UpstreamCall {
  upstreamModel: string;
  /** Ends the call on the wire when it aborts (the client left); a stream, which outlives its client, has none. */
  signal?: CancelSignal;
  requestId: string;
  /**
   * Chat: the completion tokens one choice may take, the request's own cap or what the model's context leaves after
   * the prompt's estimate. Sent only where the client set none and the provider's own default would cut answers short.
   */
  maxTokens?: number;
  /**
   * Told of what the provider billed for a part of the call it answered before the call ends: a batch while others
   * follow (Cohere embeds 96 texts a call), or an answer the adapter then refuses. The request is billed it at once,
   * so that neither a later failure nor a client that leaves meanwhile loses it; once the call succeeds, its result
   * counts the whole and these parts are taken back off (http/upstream-call.ts).
   */
  paid?: (part: PaidPart) => void;
  /** What the call's whole answers are held against as they arrive (embeddings, http/body-memory.ts). */
  memory?: AnswerMemory;
}

/** What a provider billed for a part of a call. */
export interface PaidPart {
  promptTokens: number;
  completionTokens: number;
  units: number;
}

/** Texts to embed, already validated; vectors are always asked for as floats (the gateway encodes base64 itself). */
export interface EmbeddingsRequest {
  input: string[];
  dimensions?: number;
  /** Cohere's `input_type` (an extension field); other providers ignore it. */
  inputType?: string;
}

export interface EmbeddingsResult {
  /** One vector per input, in input order. */
  vectors: number[][];
  /** The provider's own count. */
  promptTokens: number;
}

export interface RerankRequest {
  query: string;
  /** Plain texts; the gateway keeps the client's document objects itself. */
  documents: string[];
  topN?: number;
  maxTokensPerDoc?: number;
}

export interface RerankResult {
  id: string | null;
  /** Indexes into `documents`, any order. */
  results: { index: number; relevanceScore: number }[];
  /** Cohere's billing unit: one query over up to 100 documents. */
  searchUnits: number;
  /** The tokens the provider says it read (Cohere's `billed_units.input_tokens`, vLLM's `usage.total_tokens`); null: it gave no count. */
  inputTokens: number | null;
}

/** The most a rerank can be billed at a provider: what its budget hold covers. */
export interface RerankWorst {
  /** Search units, for an offer priced per unit. */
  searchUnits: number;
  /** Tokens at 3 characters a token, for an offer priced by tokens (and its bill where the provider gives no count). */
  tokens: number;
}

/** An upload spooled to disk, so that each attempt reads it again from the start. */
export interface SpooledUpload {
  path: string;
  size: number;
  filename: string;
  contentType: string;
}

export type TimestampGranularity = 'word' | 'segment';

export interface TranscriptionRequest {
  file: SpooledUpload;
  language?: string;
  prompt?: string;
  /** Names and terms to spell as written (OpenAI's `keywords[]`). */
  keywords?: string[];
  temperature?: number;
  granularities: TimestampGranularity[];
  /** The answer needs segment timings (srt, vtt, verbose_json). */
  needSegments: boolean;
}

export interface TranscriptSegment {
  start: number;
  end: number;
  text: string;
  /** Whisper's per-segment fields where the provider sent them (tokens, avg_logprob, …). */
  extra?: Record<string, unknown>;
}

export interface TranscriptWord {
  word: string;
  start: number;
  end: number;
}

/** A transcript in one shape whatever the provider; the gateway renders every response_format from it. */
export interface Transcription {
  text: string;
  language: string | null;
  /** Seconds of audio. */
  duration: number;
  /** null: the provider returned no timings. */
  segments: TranscriptSegment[] | null;
  words: TranscriptWord[] | null;
  /** Whole seconds the provider bills. */
  billedSeconds: number;
  /** The tokens the provider counted (Voxtral's usage, OpenAI's `usage.type: tokens`); null: it gave no count. */
  tokens: { input: number; output: number } | null;
}

/**
 * One provider behind one wire format. Each adapter maps the gateway's
 * OpenAI-shaped calls onto its provider and the provider's answers,
 * errors and quirks back, so routing treats every provider alike.
 */
export interface ProviderAdapter {
  readonly id: string;
  readonly type: ProviderType;
  /** The provider behind the wire format, whose refusals of request fields routing knows (PROVIDERS.md 2). */
  readonly vendor: Vendor;
  readonly region: string;
  /**
   * The upstream model names the provider lists now; null when it answers but lists nothing that offers name
   * (Azure without a deployments list: offers name deployments, which only the control plane lists), so that
   * every configured offer stands.
   */
  listModels(signal?: AbortSignal): Promise<string[] | null>;
  chat(body: ChatBody, call: UpstreamCall): Promise<ChatCompletion>;
  /**
   * Starts a stream; resolves once the provider answered 2xx (so a failed
   * start can still fail over), rejects with an UpstreamError otherwise.
   * Always asks the provider for usage where it can.
   */
  chatStream(body: ChatBody, call: UpstreamCall): Promise<ChatStream>;
  /** Text embeddings; absent where the provider has no embeddings endpoint. */
  embeddings?(request: EmbeddingsRequest, call: UpstreamCall): Promise<EmbeddingsResult>;
  /**
   * Whether its embeddings of `upstreamModel` can be `dimensions` long, for routing a request that sets it; absent:
   * the field is passed on (a model that cannot shorten its vectors is the provider's 400).
   */
  dimensionsSupport?(upstreamModel: string, dimensions: number): DimensionsSupport;
  /** Document re-ranking; absent where the provider has no rerank endpoint. */
  rerank?(request: RerankRequest, call: UpstreamCall): Promise<RerankResult>;
  /** Whether its rerank truncates each document to `maxTokensPerDoc` (Cohere's); other adapters do not send it. */
  readonly rerankTruncatesDocuments?: boolean;
  /** The most its rerank of this request is billed, as that provider counts (present with `rerank`). */
  rerankWorst?(request: RerankRequest): RerankWorst;
  /** Speech-to-text from a spooled upload; absent where the provider has no transcription endpoint. */
  transcribe?(request: TranscriptionRequest, call: UpstreamCall): Promise<Transcription>;
  close(): Promise<void>;
}

export type AdapterFactory = (config: ProviderConfig) => ProviderAdapter;
