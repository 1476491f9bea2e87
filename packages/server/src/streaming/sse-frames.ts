import { eventId, SSE_HEARTBEAT, sseEvent } from './sse-format.js';
import type { StreamEvent } from './types.js';

const BEAT = Symbol('heartbeat');

/**
 * SSE text for a client: one frame per event (the usage chunk only if the
 * client asked for it), and a comment after every `heartbeatMs` of silence.
 * Pull-based, so a slow client is fed at its own pace.
 */
export async function* sseFrames(events: AsyncIterable<StreamEvent>, streamId: string, includeUsage: boolean, heartbeatMs: number): AsyncGenerator<string> {
  const it = events[Symbol.asyncIterator]();
  let pending = it.next();
  // One timer for the whole stream, re-armed per event (a new timer and promise per event cost more than the event).
  let fireBeat: () => void = () => {};
  let beat = new Promise<typeof BEAT>((resolve) => {
    fireBeat = () => resolve(BEAT);
  });
  const timer = setTimeout(() => fireBeat(), heartbeatMs);
  try {
    for (;;) {
      const r = await Promise.race([pending, beat]);
      if (r === BEAT) {
        beat = new Promise<typeof BEAT>((resolve) => {
          fireBeat = () => resolve(BEAT);
        });
        timer.refresh();
        yield SSE_HEARTBEAT;
        continue;
      }
      if (r.done) return;
      timer.refresh();
      pending = it.next();
      if (r.value.kind === 'usage' && !includeUsage) continue;
      yield sseEvent(eventId(streamId, r.value.seq), r.value.data);
    }
  } finally {
    clearTimeout(timer);
    await it.return?.();
  }
}
