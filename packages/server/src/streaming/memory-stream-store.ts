import { EventEmitter } from 'node:events';
import { streamErrorData } from './sse-format.js';
import type { MemoryHold, StreamMemory } from './stream-memory.js';
import { DELIVERED_LINGER_S, MAX_STREAM_EVENTS, STREAM_RETENTION_S, type StreamEvent, type StreamMeta, type StreamStore, SYNTHETIC_SEQ } from './types.js';

interface Buffered {
  meta: StreamMeta;
  events: StreamEvent[];
  ended: boolean;
  expiresAt: number;
  hold: MemoryHold | null;
}

/**
 * The resume buffer in process memory (one instance). Its events are the
 * session's own (the same strings): the memory bound counts them once, and
 * they are let go when neither holds them.
 */
export class MemoryStreamStore implements StreamStore {
  private readonly streams = new Map<string, Buffered>();
  private readonly emitter = new EventEmitter();
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly graceS: number,
    private readonly memory?: StreamMemory,
  ) {
    this.emitter.setMaxListeners(0);
    this.sweeper = setInterval(() => this.sweep(), 5_000);
    this.sweeper.unref();
  }

  async create(streamId: string, meta: StreamMeta): Promise<void> {
    const hold = this.memory ? this.memory.hold(streamId) : null;
    if (hold) hold.dropCopy = () => this.drop(streamId);
    this.streams.set(streamId, { meta, events: [], ended: false, expiresAt: Date.now() + (this.graceS + STREAM_RETENTION_S) * 1000, hold });
  }

  append(streamId: string, event: StreamEvent): void {
    const s = this.streams.get(streamId);
    if (!s || (s.events.length >= MAX_STREAM_EVENTS && event.kind === 'chunk')) return;
    s.events.push(event);
    if (event.kind === 'done' || event.kind === 'error') {
      s.ended = true;
      s.expiresAt = Date.now() + STREAM_RETENTION_S * 1000;
      if (s.hold) this.memory?.ended(s.hold);
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
    let seen = false;
    for (;;) {
      // Looked up for every event, and nothing of the copy kept across a yield: a copy let go while its reader
      // is stalled is freed at once, not held by this generator.
      const found = this.after(streamId, next);
      if (found === GONE) {
        // Let go before its end (the memory bound): the client is told rather than left with a stream that stops short.
        if (seen) yield { seq: SYNTHETIC_SEQ, kind: 'error', data: streamErrorData(DROPPED, 'stream_buffer_exceeded') };
        return;
      }
      seen = true;
      if (found !== WAIT) {
        yield found;
        next = found.seq;
        if (found.kind === 'done' || found.kind === 'error') return;
        continue;
      }
      if (this.streams.get(streamId)?.ended || signal.aborted) return;
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

  /** The stream's first event after `seq`: WAIT when it has none yet, GONE when the copy is gone. */
  private after(streamId: string, seq: number): StreamEvent | typeof WAIT | typeof GONE {
    const s = this.streams.get(streamId);
    if (!s) return GONE;
    // Event n is at index n - 1 unless chunks past MAX_STREAM_EVENTS were not kept.
    const guess = s.events[seq];
    if (guess?.seq === seq + 1) return guess;
    return s.events.find((e) => e.seq > seq) ?? WAIT;
  }

  /** The memory bound let go of this copy (its hold is already released). */
  private drop(streamId: string): void {
    this.streams.delete(streamId);
    this.emitter.emit(streamId);
  }

  private sweep(): void {
    const now = Date.now();
    for (const [id, s] of this.streams) {
      if (s.expiresAt > now) continue;
      this.streams.delete(id);
      if (s.hold) this.memory?.releaseCopy(s.hold);
    }
  }

  /** Nothing to end: every stream here is relayed by this instance, and its sessions end them at shutdown. */
  endFollowers(): void {}

  async close(): Promise<void> {
    clearInterval(this.sweeper);
  }
}

const WAIT = Symbol('wait');
const GONE = Symbol('gone');
const DROPPED = "The gateway let go of this stream's events before they were all sent, to keep its stream memory bound (GW_STREAM_MEMORY_MB).";
