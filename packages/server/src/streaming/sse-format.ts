import { CANONICAL_ERRORS, type CanonicalCode, errorJson, type Variant } from '@gw/schema';
import type { StreamEvent } from './types.js';

/** One SSE event. `id` must not contain CR or LF, or a client would read a forged field. */
export function sseEvent(id: string, data: string): string {
  if (/[\r\n]/.test(id)) throw new Error('SSE id must not contain CR or LF');
  return `id: ${id}\ndata: ${data}\n\n`;
}

/**
 * An error event as it is kept (in the session, the resume buffer and the
 * idempotency archive): its canonical code and message. Each client gets it
 * in its own variant's envelope ({@link clientEventData}), since a stream
 * started on one base may be resumed on the other.
 */
export function streamErrorData(message: string, code: CanonicalCode): string {
  return JSON.stringify({ code, message });
}

/**
 * An event's data as a client of `variant` reads it: an error event in the
 * variant's envelope, with its code (OpenAI's SDK throws on a data object
 * with an `error` key, so clients see the failure); any other as kept.
 */
export function clientEventData(e: StreamEvent, variant: Variant): string {
  if (e.kind !== 'error') return e.data;
  const kept = parseKeptError(e.data);
  if (kept === null) return e.data;
  return errorJson(kept.code, variant, kept.message).body;
}

/** Whether a kept event is the error event of a stream its instance's shutdown ended. */
export function endedByShutdown(e: StreamEvent | undefined): boolean {
  return e?.kind === 'error' && parseKeptError(e.data)?.code === 'shutting_down';
}

function parseKeptError(data: string): { code: CanonicalCode; message: string } | null {
  try {
    const v = JSON.parse(data) as { code?: unknown; message?: unknown };
    if (typeof v.code !== 'string' || !Object.hasOwn(CANONICAL_ERRORS, v.code) || typeof v.message !== 'string') return null;
    return { code: v.code as CanonicalCode, message: v.message };
  } catch {
    return null;
  }
}

/** An SSE event without an id: the client's last event id stays the one before it. */
export function sseData(data: string): string {
  return `data: ${data}\n\n`;
}

/** An SSE comment, ignored by clients, that keeps proxies from dropping a silent stream. */
export const SSE_HEARTBEAT = ': keep-alive\n\n';

/** Event ids name the stream and the position in it: `<stream id>:<seq>`. */
export function eventId(streamId: string, seq: number): string {
  return `${streamId}:${seq}`;
}

/** A stream id is its request's id: 28 hex digits, or 24 for a stream begun by an instance of an earlier release. */
export function parseEventId(raw: string): { streamId: string; seq: number } | null {
  const m = /^(req_[0-9a-f]{24}(?:[0-9a-f]{4})?):(\d{1,9})$/.exec(raw.trim());
  return m ? { streamId: m[1] as string, seq: Number(m[2]) } : null;
}
