import { type SessionInit, StreamSession } from './session.js';
import type { StreamMemory } from './stream-memory.js';

/** The streams this instance is relaying, so a resume here attaches to the live session and shutdown can wait for them. */
export class StreamSessions {
  private readonly live = new Map<string, StreamSession>();
  /** Set by `abortAll` (a shutdown near its deadline): a stream that begins from then on is ended at once. */
  private aborting = false;

  /** `memory`: the bound on all streams' event data, which every session started here counts into. */
  constructor(private readonly memory?: StreamMemory) {}

  start(init: SessionInit): StreamSession {
    const session = new StreamSession(init, this.memory);
    this.live.set(init.streamId, session);
    void session.finished.finally(() => this.live.delete(init.streamId));
    // Its first chunk came after the shutdown stopped waiting for streams: it ends now (an error event after that chunk,
    // billed for it) rather than run on until the exit cuts its connection, unbilled.
    if (this.aborting) session.abort();
    return session;
  }

  get(streamId: string): StreamSession | undefined {
    return this.live.get(streamId);
  }

  get size(): number {
    return this.live.size;
  }

  /** Ends every running stream (an error event, billed for what was relayed), and every stream that begins from now on. */
  abortAll(): void {
    this.aborting = true;
    for (const s of this.live.values()) s.abort();
  }

  /**
   * Waits for every stream to end, aborting those still running after `timeoutMs`, those that began meanwhile
   * included (a request waiting on a provider when the drain began may start its stream during it).
   */
  async drain(timeoutMs: number): Promise<void> {
    const timer = setTimeout(() => this.abortAll(), timeoutMs);
    while (this.live.size > 0) await Promise.allSettled([...this.live.values()].map((s) => s.finished));
    clearTimeout(timer);
  }
}
