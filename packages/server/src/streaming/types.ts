/** What one buffered event of a relayed stream is. */
export type StreamEventKind = 'chunk' | 'usage' | 'done' | 'error';

export interface StreamEvent {
  /** Position in the stream, from 1. */
  seq: number;
  kind: StreamEventKind;
  /** The SSE `data:` payload: a chunk's JSON, `[DONE]`, or an error object's JSON. */
  data: string;
}

export interface StreamMeta {
  /** The API key that started the stream; only it may resume. */
  keyId: string;
  model: string;
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
  /** Events after `afterSeq`, then the live rest, until a `done` or `error` event or the signal aborts. */
  follow(streamId: string, afterSeq: number, signal: AbortSignal): AsyncIterable<StreamEvent>;
  close(): Promise<void>;
}

/** How long a finished stream stays resumable. */
export const STREAM_RETENTION_S = 600;
/** At most this many events are kept per stream in Redis (MAXLEN). */
export const MAX_STREAM_EVENTS = 200_000;
/** At most this much event data is buffered per stream; past it the stream ends with an error. */
export const MAX_STREAM_BYTES = 32 * 1024 * 1024;
