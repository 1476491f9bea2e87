import { EventEmitter } from 'node:events';
import type { ChatChunk, ChatStream, TokenUsage } from '../providers/types.js';
import { MAX_STREAM_BYTES, type StreamEvent, type StreamEventKind, type StreamStore } from './types.js';

export interface StreamOutcome {
  /** The provider's own count, when it arrived. */
  usage: TokenUsage | null;
  /** Characters of content and reasoning relayed, for billing a stream cut before its usage. */
  relayedChars: number;
  error: Error | null;
  /** The client left and the grace period ran out. */
  abandoned: boolean;
}

export interface SessionInit {
  streamId: string;
  /** The gateway's model id, written into every chunk in place of the provider's name. */
  model: string;
  upstream: ChatStream;
  iterator: AsyncIterator<ChatChunk>;
  first: ChatChunk;
  store: StreamStore;
  graceMs: number;
  onEnd: (outcome: StreamOutcome) => void;
}

/**
 * One relayed stream. It reads the upstream to its end whether or not a
 * client is attached (for at most the grace period once the last one
 * left), numbers every event, keeps them for local readers and mirrors
 * them into the resume buffer.
 */
export class StreamSession {
  readonly streamId: string;
  private readonly events: StreamEvent[] = [];
  private readonly emitter = new EventEmitter();
  private ended = false;
  private readers = 0;
  private graceTimer: NodeJS.Timeout | null = null;
  private abandoned = false;
  private usage: TokenUsage | null = null;
  private relayedChars = 0;
  private bufferedBytes = 0;
  readonly finished: Promise<void>;

  constructor(private readonly init: SessionInit) {
    this.streamId = init.streamId;
    this.emitter.setMaxListeners(0);
    this.finished = this.pump();
  }

  /** Events after `afterSeq`, then the live rest, until the stream ends. Attaching cancels the grace period. */
  async *follow(afterSeq: number): AsyncGenerator<StreamEvent> {
    this.attach();
    try {
      let next = afterSeq;
      for (;;) {
        while (next < this.events.length) {
          const e = this.events[next] as StreamEvent;
          next++;
          yield e;
        }
        if (this.ended) return;
        await new Promise<void>((resolve) => this.emitter.once('event', resolve));
      }
    } finally {
      this.detach();
    }
  }

  abort(): void {
    this.init.upstream.abort();
  }

  private attach(): void {
    this.readers++;
    if (this.graceTimer) clearTimeout(this.graceTimer);
    this.graceTimer = null;
  }

  private detach(): void {
    this.readers--;
    if (this.readers > 0 || this.ended) return;
    this.graceTimer = setTimeout(() => {
      this.abandoned = true;
      this.init.upstream.abort();
    }, this.init.graceMs);
    this.graceTimer.unref();
  }

  private async pump(): Promise<void> {
    let error: Error | null = null;
    try {
      this.chunk(this.init.first);
      for (;;) {
        const r = await this.init.iterator.next();
        if (r.done) break;
        this.chunk(r.value);
      }
      this.push('done', '[DONE]');
    } catch (err) {
      error = err instanceof Error ? err : new Error(String(err));
      const message = this.abandoned ? 'The stream was abandoned by its client and stopped.' : `The upstream provider failed mid-stream: ${error.message}`;
      // OpenAI's SDK throws on a data object with an `error` key, so clients see the failure.
      this.push('error', JSON.stringify({ error: { message, type: 'server_error', param: null, code: 'upstream_error' } }));
    } finally {
      this.ended = true;
      if (this.graceTimer) clearTimeout(this.graceTimer);
      this.emitter.emit('event');
      this.init.onEnd({ usage: this.usage, relayedChars: this.relayedChars, error, abandoned: this.abandoned });
    }
  }

  private chunk(c: ChatChunk): void {
    if (this.bufferedBytes > MAX_STREAM_BYTES) {
      // The buffer is bounded: a stream longer than it is stopped rather than grow memory without end.
      throw new Error(`the stream exceeded the gateway's ${MAX_STREAM_BYTES} byte buffer`);
    }
    const isUsage = c.choices.length === 0 && c.usage;
    if (isUsage) this.usage = c.usage ?? null;
    this.relayedChars += contentChars(c);
    this.push(isUsage ? 'usage' : 'chunk', JSON.stringify({ ...c, model: this.init.model }));
  }

  private push(kind: StreamEventKind, data: string): void {
    this.bufferedBytes += data.length;
    const event = { seq: this.events.length + 1, kind, data };
    this.events.push(event);
    this.init.store.append(this.streamId, event);
    this.emitter.emit('event');
  }
}

function contentChars(c: ChatChunk): number {
  let n = 0;
  for (const choice of c.choices) {
    const delta = (choice as { delta?: { content?: unknown; reasoning_content?: unknown } }).delta;
    if (typeof delta?.content === 'string') n += delta.content.length;
    if (typeof delta?.reasoning_content === 'string') n += delta.reasoning_content.length;
  }
  return n;
}
