/** Public types of the simulator: faults, stats, timing. */

export const PROVIDER_IDS = ['scaleway', 'ovh', 'nebius', 'mistral', 'azure', 'cohere'] as const;
export type ProviderId = (typeof PROVIDER_IDS)[number];

export type WireType = 'openai' | 'mistral' | 'azure' | 'cohere';

/** What a request asked for; used by stats and by fault scoping. */
export const ENDPOINTS = ['chat', 'embeddings', 'models', 'rerank', 'transcriptions'] as const;
export type Endpoint = (typeof ENDPOINTS)[number];

/** Which requests a fault applies to. */
export interface FaultScope {
  /** Upstream model name as sent by the client (Azure: the deployment name). Omitted: every model. */
  model?: string;
  /** Endpoints the fault applies to. Omitted: every endpoint except `models` (so registry rebuilds do not consume it). */
  endpoints?: Endpoint[];
  /** Apply to the next K matching requests, then clear itself. Omitted: until cleared. */
  times?: number;
  /** Let this many matching requests through first (e.g. 1: the second of a client's batched calls fails). Omitted: 0. */
  skip?: number;
}

/**
 * A fault injected into a provider. `afterChunks` counts SSE data events (the role chunk and Azure's
 * prompt-filter chunk included); for a non-streaming reply any value > 0 means "after the headers and
 * half of the body".
 */
export type Fault = FaultScope &
  (
    | {
        /** Answer with this status and the provider's real error body for it. */
        kind: 'status';
        status: number;
        message?: string;
        /** Retry-After header: seconds or an HTTP date. Default 1 on 429/503; `null` omits it. */
        retryAfter?: number | string | null;
        /** Also send `retry-after-ms`. */
        retryAfterMs?: number;
        /** Extra response headers (override the defaults). */
        headers?: Record<string, string>;
        /** Pick an alternative real body shape where a provider has several (e.g. Mistral 401/429, Azure 429 without retry-after). */
        variant?: number;
      }
    | {
        /** Accept and never answer. With `afterChunks`: send headers (and that many chunks), then stall forever. */
        kind: 'hang';
        afterChunks?: number;
      }
    | {
        /** Delay the whole response (headers included) by `ms`; `perChunkMs` slows every later chunk too. */
        kind: 'latency';
        ms: number;
        perChunkMs?: number;
      }
    | {
        /** Send the headers at once, then wait `ms` before the first body byte. */
        kind: 'slow_first_byte';
        ms: number;
      }
    | {
        /** Pause `ms` after `afterChunks` chunks, then carry on. */
        kind: 'stall';
        afterChunks: number;
        ms: number;
      }
    | {
        /** Reset the TCP connection; immediately, or after `afterChunks` chunks, when the next one would have come. */
        kind: 'reset';
        afterChunks?: number;
      }
    | {
        /** End the response cleanly but early: no `[DONE]` (default: after half of the chunks). */
        kind: 'truncate';
        afterChunks?: number;
      }
    | {
        /** Streams only: after `afterChunks` chunks (default 1) send the provider's error object as an SSE data event and end, no `[DONE]` (Scaleway's documented 5xx-after-200). */
        kind: 'error_after_200';
        afterChunks?: number;
        status?: number;
        message?: string;
      }
    | {
        /** Azure only: `prompt` answers 400 content_filter; `completion` ends the answer with finish_reason content_filter. */
        kind: 'content_filter';
        on: 'prompt' | 'completion';
      }
  );

export type FaultKind = Fault['kind'];

/** One request as the simulator saw it. */
export interface RequestRecord {
  at: number;
  method: string;
  path: string;
  endpoint: Endpoint | null;
  model: string | null;
  stream: boolean;
  /** Final status; 0 when the connection was reset or the client went away before an answer. */
  status: number | null;
  fault: FaultKind | null;
}

/** The last request in full: headers (lower-cased names) and parsed body. */
export interface LastRequest extends RequestRecord {
  query: Record<string, string>;
  headers: Record<string, string>;
  /** JSON body; multipart: `{ fields, files: [{ field, filename, contentType, size }] }`; none: null. */
  body: unknown;
}

export interface ProviderStats {
  id: string;
  /** Requests seen (control routes under /__sim excluded). */
  total: number;
  byEndpoint: Record<string, number>;
  byModel: Record<string, number>;
  byStatus: Record<string, number>;
  /** Requests rejected for a missing or wrong key. */
  authFailures: number;
  /** Requests a fault was applied to. */
  faultsApplied: number;
  inFlight: number;
  last: LastRequest | null;
  /** The most recent requests, oldest first (at most 50). */
  recent: RequestRecord[];
}

/** Reasoning output convention of an OpenAI-compatible provider (PROVIDERS §3.2). */
export type ReasoningStyle = 'reasoning_content' | 'reasoning' | 'split' | 'think_tags';

/** Run-time settings of one provider. */
export interface ProviderSettings {
  /** Before the response headers. */
  latencyMs: number;
  /** Streams: from headers to the first chunk; non-streaming replies wait this too. */
  ttftMs: number;
  /** Between chunks (non-streaming replies wait this per generated token as well). */
  chunkGapMs: number;
  /** openai-type providers only. */
  reasoningStyle: ReasoningStyle;
  /** Azure: also send asynchronous-filter annotation chunks. */
  asyncContentFilter: boolean;
  /** Pad chat answers to this many content tokens (long streams for benchmarks); null = short natural answers. */
  answerTokens: number | null;
  /**
   * Mistral: stream tool calls in fragments (the continuations with the placeholder id "null", told apart by their
   * `index`), as Mistral serves some models, instead of each call whole in one chunk without `index`.
   */
  toolCallFragments: boolean;
}
