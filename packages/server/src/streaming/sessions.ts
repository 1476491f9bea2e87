import { type SessionInit, StreamSession } from './session.js';
import type { StreamMemory } from './stream-memory.js';

/** The streams this instance is relaying, so a resume here attaches to the live session and shutdown can wait for them. */
export class StreamSessions {
  private readonly live = new Map<string, StreamSession>();

  /** `memory`: the bound on all streams' event data, which every session started here counts into. */
  constructor(private readonly memory?: StreamMemory) {}

  start(init: SessionInit): StreamSession {
    const session = new StreamSession(this.memory ? { ...init, memory: this.memory } : init);
    this.live.set(init.streamId, session);
    void session.finished.finally(() => this.live.delete(init.streamId));
    return session;
  }

  get(streamId: string): StreamSession | undefined {
    return this.live.get(streamId);
  }

  get size(): number {
    return this.live.size;
  }

  /** Waits for every stream to end, aborting those still running after `timeoutMs`. */
  async drain(timeoutMs: number): Promise<void> {
    const all = [...this.live.values()];
    const timer = setTimeout(() => {
      for (const s of all) s.abort();
    }, timeoutMs);
    await Promise.allSettled(all.map((s) => s.finished));
    clearTimeout(timer);
  }
}
