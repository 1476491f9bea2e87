import { Readable } from 'node:stream';
import type { StreamSession } from './session.js';
import { eventId, SSE_HEARTBEAT, sseEvent } from './sse-format.js';

/**
 * A client's SSE body from a live session: each new event is written as
 * it lands in the session (events that arrived together go out in one
 * write), the usage chunk only if the client asked for it, and a comment
 * after every `heartbeatMs` of silence.
 *
 * Paced by the client: while its socket is full the frames wait in the
 * session's log, not in this stream, and go out when it drains. Closing
 * the client's side (destroy) detaches from the session, which starts its
 * grace period if no other reader is left.
 */
export class LiveFrames extends Readable {
  private next: number;
  private wanting = false;
  private stopped = false;
  private readonly unsubscribe: () => void;
  private readonly heartbeat: NodeJS.Timeout;

  constructor(
    private readonly session: StreamSession,
    afterSeq: number,
    private readonly includeUsage: boolean,
    heartbeatMs: number,
  ) {
    super({ highWaterMark: 16 * 1024 });
    this.next = afterSeq;
    this.unsubscribe = session.subscribe(() => this.flush());
    this.heartbeat = setInterval(() => {
      // Silence for heartbeatMs: a comment keeps proxies and clients from timing out.
      if (this.wanting) this.wanting = this.push(SSE_HEARTBEAT);
    }, heartbeatMs);
    this.heartbeat.unref();
  }

  override _read(): void {
    this.wanting = true;
    this.flush();
  }

  override _destroy(err: Error | null, callback: (error?: Error | null) => void): void {
    this.stop();
    callback(err);
  }

  private flush(): void {
    if (!this.wanting || this.stopped) return;
    const log = this.session.log;
    let text = '';
    while (this.next < log.length) {
      const e = log[this.next++];
      if (e === undefined || (e.kind === 'usage' && !this.includeUsage)) continue;
      text += sseEvent(eventId(this.session.streamId, e.seq), e.data);
    }
    if (text !== '') {
      this.heartbeat.refresh();
      this.wanting = this.push(text);
    }
    if (this.session.ended && this.next >= log.length) {
      this.stop();
      this.push(null);
    }
  }

  private stop(): void {
    this.stopped = true;
    clearInterval(this.heartbeat);
    this.unsubscribe();
  }
}
