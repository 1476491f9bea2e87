/** One SSE event. `id` must not contain CR or LF, or a client would read a forged field. */
export function sseEvent(id: string, data: string): string {
  if (/[\r\n]/.test(id)) throw new Error('SSE id must not contain CR or LF');
  return `id: ${id}\ndata: ${data}\n\n`;
}

/** An error event's data (OpenAI's SDK throws on a data object with an `error` key, so clients see the failure). */
export function streamErrorData(message: string): string {
  return JSON.stringify({ error: { message, type: 'server_error', param: null, code: 'upstream_error' } });
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

export function parseEventId(raw: string): { streamId: string; seq: number } | null {
  const m = /^(req_[0-9a-f]{24}):(\d{1,9})$/.exec(raw.trim());
  return m ? { streamId: m[1] as string, seq: Number(m[2]) } : null;
}
