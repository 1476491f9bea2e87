import { EventEmitter } from 'node:events';
import { DELIVERED_LINGER_S, MAX_STREAM_EVENTS, STREAM_RETENTION_S, type StreamEvent, type StreamMeta, type StreamStore } from './types.js';

interface Buffered {
  meta: StreamMeta;
  events: StreamEvent[];
  ended: boolean;
  expiresAt: number;
}

/** The resume buffer in process memory (one instance). */
export class MemoryStreamStore implements StreamStore {
  private readonly streams = new Map<string, Buffered>();
  private readonly emitter = new EventEmitter();
  private readonly sweeper: NodeJS.Timeout;

  constructor(private readonly graceS: number) {
    this.emitter.setMaxListeners(0);
    this.sweeper = setInterval(() => this.sweep(), 5_000);
    this.sweeper.unref();
  }

  async create(streamId: string, meta: StreamMeta): Promise<void> {
    this.streams.set(streamId, { meta, events: [], ended: false, expiresAt: Date.now() + (this.graceS + STREAM_RETENTION_S) * 1000 });
  }

  append(streamId: string, event: StreamEvent): void {
    const s = this.streams.get(streamId);
    if (!s || (s.events.length >= MAX_STREAM_EVENTS && event.kind === 'chunk')) return;
    s.events.push(event);
    if (event.kind === 'done' || event.kind === 'error') {
      s.ended = true;
      s.expiresAt = Date.now() + STREAM_RETENTION_S * 1000;
    }
    this.emitter.emit(streamId);
  }

  async meta(streamId: string): Promise<StreamMeta | null> {
    return this.streams.get(streamId)?.meta ?? null;
  }

  delivered(streamId: string): void {
    const s = this.streams.get(streamId);
    if (s?.ended) s.expiresAt = Math.min(s.expiresAt, Date.now() + DELIVERED_LINGER_S * 1000);
  }

  async *follow(streamId: string, afterSeq: number, signal: AbortSignal): AsyncIterable<StreamEvent> {
    let next = afterSeq;
    for (;;) {
      const s = this.streams.get(streamId);
      if (!s) return;
      const pending = s.events.filter((e) => e.seq > next);
      for (const e of pending) {
        yield e;
        next = e.seq;
        if (e.kind === 'done' || e.kind === 'error') return;
      }
      if (s.ended || signal.aborted) return;
      await new Promise<void>((resolve) => {
        const wake = () => {
          this.emitter.off(streamId, wake);
          signal.removeEventListener('abort', wake);
          resolve();
        };
        this.emitter.on(streamId, wake);
        signal.addEventListener('abort', wake);
      });
    }
  }

  private sweep(): void {
    const now = Date.now();
    for (const [id, s] of this.streams) if (s.expiresAt <= now) this.streams.delete(id);
  }

  async close(): Promise<void> {
    clearInterval(this.sweeper);
  }
}
