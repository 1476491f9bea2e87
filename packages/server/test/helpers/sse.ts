export interface SseEvent {
  id: string | undefined;
  data: string;
}

export function streamRequest(base: string, key: string, body: unknown, headers: Record<string, string> = {}, signal?: AbortSignal): Promise<Response> {
  return fetch(`${base}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
    ...(signal ? { signal } : {}),
  });
}

/** Reads SSE events off a response (all of them, or the first `limit`), ignoring comments. */
export async function readSse(res: Response, limit = Number.POSITIVE_INFINITY): Promise<SseEvent[]> {
  if (!res.body) throw new Error(`no body (status ${res.status})`);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  const events: SseEvent[] = [];
  let buffer = '';
  while (events.length < limit) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut = buffer.indexOf('\n\n');
    while (cut >= 0 && events.length < limit) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const lines = block.split('\n').filter((l) => !l.startsWith(':'));
      if (lines.length > 0) {
        const id = lines.find((l) => l.startsWith('id: '))?.slice(4);
        const data = lines
          .filter((l) => l.startsWith('data: '))
          .map((l) => l.slice(6))
          .join('\n');
        events.push({ id, data });
      }
      cut = buffer.indexOf('\n\n');
    }
  }
  if (events.length >= limit) await reader.cancel().catch(() => {});
  return events;
}
