import type { ServerResponse } from 'node:http';
import type { Variant } from '@gw/schema';
import { clientEventData, eventId, SSE_HEARTBEAT, sseData, sseEvent } from './sse-format.js';
import { type StreamEvent, SYNTHETIC_SEQ } from './types.js';

/** Whether the request asked for the usage chunk (`stream_options.include_usage`). */
export function includeUsage(body: unknown): boolean {
  const opts = (body as { stream_options?: { include_usage?: unknown } | null } | null)?.stream_options;
  return opts?.include_usage === true;
}

/**
 * Sends a stream's head now if no frame took it: a resume of a stream that is silent (a model thinking) has no event
 * to send, and its head waited for the first heartbeat, so its client had no status for up to GW_STREAM_HEARTBEAT_MS.
 */
export function headNow(res: ServerResponse): void {
  if (!res.headersSent && !res.destroyed) res.flushHeaders();
}

/** {@link headNow} once frames are piped to `res` (by then Fastify has set the headers). */
export function headWhenPiped(res: ServerResponse): void {
  res.once('pipe', () => headNow(res));
}

/**
 * SSE text for a client: one frame per event (the usage chunk only if the
 * client asked for it), and a comment after every `heartbeatMs` of silence.
 * Pull-based, so a slow client is fed at its own pace.
 *
 * One timer for the whole stream, re-armed per event, and one wake-up
 * promise per wait: racing each event against a heartbeat promise cost a
 * promise per event and left a reaction on the heartbeat promise for every
 * event until it fired.
 */
export async function* sseFrames(
  events: AsyncIterable<StreamEvent>,
  streamId: string,
  includeUsage: boolean,
  heartbeatMs: number,
  variant: Variant,
): AsyncGenerator<string> {
  const it = events[Symbol.asyncIterator]();
  let next: IteratorResult<StreamEvent> | null = null;
  let failure: { error: unknown } | null = null;
  let beatDue = false;
  let wake: (() => void) | null = null;
  const request = () => {
    it.next().then(
      (r) => {
        next = r;
        wake?.();
      },
      (error: unknown) => {
        failure = { error };
        wake?.();
      },
    );
  };
  const timer = setTimeout(() => {
    beatDue = true;
    wake?.();
  }, heartbeatMs);
  request();
  try {
    for (;;) {
      if (next === null && failure === null && !beatDue) {
        await new Promise<void>((resolve) => {
          wake = resolve;
        });
        wake = null;
      }
      if (failure !== null) throw (failure as { error: unknown }).error;
      const r = next as IteratorResult<StreamEvent> | null;
      if (r !== null) {
        if (r.done) return;
        next = null;
        beatDue = false;
        timer.refresh();
        request();
        if (r.value.kind === 'usage' && !includeUsage) continue;
        const data = clientEventData(r.value, variant);
        yield r.value.seq === SYNTHETIC_SEQ ? sseData(data) : sseEvent(eventId(streamId, r.value.seq), data);
        continue;
      }
      // Silence for heartbeatMs: a comment keeps proxies and clients from timing out.
      beatDue = false;
      timer.refresh();
      yield SSE_HEARTBEAT;
    }
  } finally {
    clearTimeout(timer);
    await it.return?.();
  }
}
