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
  let timer: NodeJS.Timeout | undefined;
  try {
    for (;;) {
      const beat = new Promise<typeof BEAT>((resolve) => {
        timer = setTimeout(() => resolve(BEAT), heartbeatMs);
      });
      const r = await Promise.race([pending, beat]);
      clearTimeout(timer);
      if (r === BEAT) {
        yield SSE_HEARTBEAT;
        continue;
      }
      if (r.done) return;
      pending = it.next();
      if (r.value.kind === 'usage' && !includeUsage) continue;
      yield sseEvent(eventId(streamId, r.value.seq), r.value.data);
    }
  } finally {
    clearTimeout(timer);
    await it.return?.();
  }
}
