/** What one buffered event of a relayed stream is. */
export type StreamEventKind = 'chunk' | 'usage' | 'done' | 'error';

/** The position of an event the gateway adds to a resumed stream (an error): not one of the stream's, so its frame has no id. */
export const SYNTHETIC_SEQ = 0;

export interface StreamEvent {
  /** Position in the stream, from 1 (SYNTHETIC_SEQ: an event of the gateway's own, outside the stream). */
  seq: number;
  kind: StreamEventKind;
  /** The SSE `data:` payload: a chunk's JSON, `[DONE]`, or an error object's JSON. */
  data: string;
}

export interface StreamMeta {
  /** The API key that started the stream; only it may resume. */
  keyId: string;
  model: string;
  /** Where the stream was routed, for a resumed stream's headers (records written before it have none). */
  routing?: StreamRouting;
}

export interface StreamRouting {
  provider: string;
  region: string;
  strategy: string;
  hops: number;
}

/**
 * The resume buffer: every event of a stream, kept for a while after it
 * ends, so a client that lost the connection can pick it up again (on any
 * instance, when the buffer is shared).
 */
export interface StreamStore {
  create(streamId: string, meta: StreamMeta): Promise<void>;
  /** Appends in order; never throws (a buffer outage must not break the live stream). */
  append(streamId: string, event: StreamEvent): void;
  meta(streamId: string): Promise<StreamMeta | null>;
  /**
   * The stream's last event was written to a client's socket: nobody will
   * need to resume it past a short linger (in case the connection broke
   * after that write), so its buffer is let go early. Never throws.
   */
  delivered(streamId: string): void;
  /** Events after `afterSeq`, then the live rest, until a `done` or `error` event or the signal aborts. */
  follow(streamId: string, afterSeq: number, signal: AbortSignal): AsyncIterable<StreamEvent>;
  /** Shutdown: every follow still reading a stream relayed elsewhere ends with an error event, and every later one at once. */
  endFollowers(): void;
  close(): Promise<void>;
}

/**
 * How long a reader elsewhere looks for a stream's shared record before it counts the stream as gone: the relaying
 * instance writes it with the first event, before the stream's answer goes out, and may be retrying that write
 * through a stall.
 */
export const RECORD_PATIENCE_MS = 3_000;
/** How long a finished stream that no client received whole stays resumable. */
export const STREAM_RETENTION_S = 600;
/** How long one that a client received whole (its last event written to the socket) stays resumable. */
export const DELIVERED_LINGER_S = 10;
/** At most this many events are kept per stream in memory, and this many entries (each a batch of events) in Redis (MAXLEN). */
export const MAX_STREAM_EVENTS = 200_000;
/** At most this much event data is buffered per stream; past it the stream ends with an error. */
export const MAX_STREAM_BYTES = 32 * 1024 * 1024;

/** The shared resume buffer (Redis) could not be read: the cause of a resume's 503, logged as that, not as the store. */
export class ResumeBufferUnavailableError extends Error {
  constructor(cause: unknown) {
    super('the stream resume buffer could not be read', { cause });
  }
}
