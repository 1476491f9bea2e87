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
 * Whether a chunk carries anything of the answer for the client: content, reasoning, a tool or function call, a
 * refusal, logprobs, a finish_reason or usage. Providers open a stream with a role-only delta (`role: 'assistant'`,
 * `content: ''`, OpenAI's `refusal: null`, some hosts' `tool_calls: []`; with logprobs asked, an empty `logprobs`), and
 * some with an empty-choices chunk (Azure's prompt filter results):
 * those say nothing yet, and the provider may still fail before it answers. Read only until a stream's first such chunk.
 */
export function answers(c: ChatChunk): boolean {
  if (c.usage) return true;
  for (const choice of c.choices) {
    const part = choice as { delta?: Record<string, unknown> | null; finish_reason?: unknown; logprobs?: unknown } | null;
    if (!part) continue;
    if (part.finish_reason != null || carries(part.logprobs as Record<string, unknown> | null | undefined)) return true;
    if (carries(part.delta, 'role')) return true;
  }
  return false;
}

/**
 * Whether an object holds something besides `skip`: a value that is not null, empty text or an empty list. The
 * opening chunk's empty lists (`tool_calls: []`, `annotations: []` beside the role, as some hosts send it;
 * `logprobs: {content: [], refusal: null}` when logprobs were asked) say nothing yet.
 */
function carries(o: Record<string, unknown> | null | undefined, skip?: string): boolean {
  if (o == null) return false;
  if (typeof o !== 'object') return true;
  for (const key in o) {
    const v = o[key];
    if (key === skip || v === null || v === undefined || v === '') continue;
    if (Array.isArray(v) && v.length === 0) continue;
    return true;
  }
  return false;
}

/**
 * Holds a relayed stream's chunks until a sink attaches. `first` settles
 * once the answer begins (the first chunk that {@link answers}), or fails
 * if the stream ends or fails before it: a provider that sends its role
 * chunk and then fails can still fail over. The chunks before the answer
 * reach the sink, in order, only if it begins.
 */
export class RelayGate implements ChunkSink {
  readonly first: Promise<ChatChunk>;
  private held: ChatChunk[] = [];
  /** The answer began: `first` is settled and no chunk is looked at again. */
  private begun = false;
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
    if (!this.begun && answers(c)) {
      this.begun = true;
      this.settle.resolve(c);
    }
  }

  end(error: Error | null): void {
    if (this.target) {
      this.target.end(error);
      return;
    }
    this.ended = { error };
    if (!this.begun) {
      // Ended before the answer began (a role chunk at most): what is held goes nowhere, and the next offer may answer.
      this.held = [];
      this.settle.reject(error ?? this.beforeFirst());
    }
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
