import type { ChatChunk, ChatStream, ChunkSink } from './types.js';

/** Pull view of a pushed stream, for readers that iterate (tests, collectors). Leaving early aborts the upstream. */
export async function* iterateRelay(stream: Pick<ChatStream, 'relay' | 'abort'>): AsyncGenerator<ChatChunk> {
  const queue: ChatChunk[] = [];
  let end: { error: Error | null } | null = null;
  let wake: (() => void) | null = null;
  stream.relay({
    chunk: (c) => {
      queue.push(c);
      wake?.();
    },
    end: (error) => {
      end = { error };
      wake?.();
    },
  });
  try {
    for (;;) {
      while (queue.length > 0) yield queue.shift() as ChatChunk;
      if (end !== null) {
        const { error } = end as { error: Error | null };
        if (error) throw error;
        return;
      }
      await new Promise<void>((resolve) => {
        wake = resolve;
      });
      wake = null;
    }
  } finally {
    if (end === null) stream.abort();
  }
}

/**
 * Holds a relayed stream's chunks until a sink attaches. `first` settles
 * with the first chunk, or fails if the stream ends or fails before one
 * (so a provider that fails before its first byte can still fail over).
 */
export class RelayGate implements ChunkSink {
  readonly first: Promise<ChatChunk>;
  private held: ChatChunk[] = [];
  private ended: { error: Error | null } | null = null;
  private target: ChunkSink | null = null;
  /** What the upstream last told of an unfinished event, passed on at attach. */
  private unfinishedBytes = 0;
  private settle!: { resolve: (c: ChatChunk) => void; reject: (e: Error) => void };

  constructor(
    readonly upstream: ChatStream,
    private readonly beforeFirst: () => Error,
  ) {
    this.first = new Promise((resolve, reject) => {
      this.settle = { resolve, reject };
    });
    upstream.relay(this);
  }

  chunk(c: ChatChunk): void {
    if (this.target) {
      this.target.chunk(c);
      return;
    }
    this.held.push(c);
    if (this.held.length === 1) this.settle.resolve(c);
  }

  end(error: Error | null): void {
    if (this.target) {
      this.target.end(error);
      return;
    }
    this.ended = { error };
    if (this.held.length === 0) this.settle.reject(error ?? this.beforeFirst());
  }

  unfinished(bytes: number): void {
    if (this.target) this.target.unfinished?.(bytes);
    else this.unfinishedBytes = bytes;
  }

  /** From now on chunks go to `sink`, those held first. */
  attach(sink: ChunkSink): void {
    this.target = sink;
    const held = this.held;
    this.held = [];
    for (const c of held) sink.chunk(c);
    if (this.unfinishedBytes !== 0) sink.unfinished?.(this.unfinishedBytes);
    if (this.ended) sink.end(this.ended.error);
  }
}
