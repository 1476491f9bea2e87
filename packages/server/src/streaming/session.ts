import { UpstreamError } from '../errors/upstream-error.js';
import { redactSecrets, withoutKnownSecrets } from '../lib/redact.js';
import { chunkJson } from '../providers/chunk-json.js';
import type { ChatChunk, ChatStream, ChunkSink, TokenUsage } from '../providers/types.js';
import { estimatedUsage, generatedChars, usageAtMost } from '../providers/usage-estimate.js';
import { streamErrorData } from './sse-format.js';
import { EVENT_OVERHEAD_BYTES, type MemoryHold, type ReclaimableSession, type StreamMemory } from './stream-memory.js';
import { MAX_STREAM_BYTES, type StreamEvent, type StreamEventKind, type StreamMeta, type StreamStore, SYNTHETIC_SEQ } from './types.js';

export interface StreamOutcome {
  /** The provider's own count, when it arrived. */
  usage: TokenUsage | null;
  /** Characters of content and reasoning relayed, for billing a stream cut before its usage. */
  relayedChars: number;
  error: Error | null;
  /**
   * The provider's failure after its answer was whole (every choice finished, and its usage in if it came), before
   * `[DONE]`: the stream ended normally all the same (`error` is null), told here for the operator.
   */
  lateFailure: Error | null;
  /** The client left and the grace period ran out. */
  abandoned: boolean;
}

export interface SessionInit {
  streamId: string;
  /** Who started the stream and where it went: a resume on this instance needs nothing from the shared buffer. */
  owner?: StreamMeta;
  /** The gateway's model id, written into every chunk in place of the provider's name. */
  model: string;
  upstream: ChatStream;
  /** Where the upstream's chunks wait (the first one at least) until the session takes them. */
  source: { attach(sink: ChunkSink): void };
  store: StreamStore;
  graceMs: number;
  /** The gateway's count of the prompt, for the usage chunk of a stream whose provider reported none. */
  promptTokens: number;
  /** How many choices the request asked for (`n`): the answer is whole once each has its `finish_reason`. */
  choices: number;
  /**
   * The most completion tokens the stream is billed, given the prompt's count (`max_tokens` times `n`, or what the
   * context window leaves): neither an estimate nor the usage chunk the client gets says more than is billed.
   */
  billedCap: (promptTokens: number) => number;
  /** The provider's prompt count as billed: at most what the request could cost (http/usage-bounds.ts). */
  promptAtMost: (reported: number) => number;
  onEnd: (outcome: StreamOutcome) => void;
}

/** A stream the gateway itself ended (not the provider's failure): `code` says why, in its error event and its usage record. */
export class StreamEndedByGateway extends Error {
  constructor(
    readonly code: 'stream_buffer_exceeded' | 'shutting_down',
    message: string,
  ) {
    super(message);
  }
}

/** Ended to keep a memory bound, its own or the instance's. */
export class StreamBoundError extends StreamEndedByGateway {
  constructor(message: string) {
    super('stream_buffer_exceeded', message);
  }
}

/** Ended because its instance is shutting down. */
export class StreamStoppedError extends StreamEndedByGateway {
  constructor(message: string) {
    super('shutting_down', message);
  }
}

/** Where a session's log was let go (by the memory bound): readers that had not read up to `end` get `event` and stop. */
export interface CutOff {
  end: number;
  event: StreamEvent;
}

/**
 * One relayed stream. It reads the upstream to its end whether or not a
 * client is attached (for at most the grace period once the last one
 * left), numbers every event, keeps them for local readers and mirrors
 * them into the resume buffer. Chunks are pushed in as they arrive; the
 * readers wake once the events that arrived together (one upstream read)
 * are all in, so that they reach the client in one write, and at once at
 * the end.
 */
export class StreamSession implements ReclaimableSession, ChunkSink {
  readonly streamId: string;
  private events: StreamEvent[] = [];
  /** Each reader's wake-up, and how many bytes of event data it has read. */
  private readonly listeners = new Map<() => void, () => number>();
  private readonly hold: MemoryHold | null;
  private cut: CutOff | null = null;
  private done = false;
  private readers = 0;
  private graceTimer: NodeJS.Timeout | null = null;
  private abandoned = false;
  private usage: TokenUsage | null = null;
  /** The provider's last usage chunk as sent, held back: a stream carries one, just before `[DONE]`, as OpenAI's do. */
  private usageData: string | null = null;
  /** Of the last chunk, what an estimated usage chunk repeats (not the chunk: a thousand streams would each keep one). */
  private lastId: string | null = null;
  private lastCreated = 0;
  private relayedChars = 0;
  /** The choices that have their `finish_reason`. */
  private readonly finishedChoices = new Set<number>();
  /** The usage held came after every choice finished: the provider's count of the whole answer. */
  private usageOfWhole = false;
  private bufferedBytes = 0;
  /** Bytes the upstream reader holds of an event not yet ended, when it told of them (a large one): counted as held. */
  private unfinishedBytes = 0;
  private wakeQueued = false;
  private readonly wake = () => {
    this.wakeQueued = false;
    this.notify();
  };
  private resolveFinished!: () => void;
  readonly finished: Promise<void>;

  /** `memory`: the bound on all streams' event data in this instance's memory (none: not counted, as in tests). */
  constructor(
    private readonly init: SessionInit,
    private readonly memory?: StreamMemory,
  ) {
    this.streamId = init.streamId;
    this.hold = memory ? memory.hold(init.streamId) : null;
    if (this.hold) this.hold.session = this;
    this.finished = new Promise((resolve) => {
      this.resolveFinished = resolve;
    });
    // The session is the upstream's sink itself: no object or closures made for it per stream.
    init.source.attach(this);
  }

  /** The stream's record as the resume buffer has it (null: not given, as in tests). */
  get owner(): StreamMeta | null {
    return this.init.owner ?? null;
  }

  /** Every event so far, in order (event `seq` n is at index n - 1). */
  get log(): readonly StreamEvent[] {
    return this.events;
  }

  /** Set once the memory bound let go of the log (then empty). */
  get cutOff(): CutOff | null {
    return this.cut;
  }

  /** Bytes of event data in the events up to `seq` (a reader resuming after it has read them). */
  bytesThrough(seq: number): number {
    let n = 0;
    for (let i = 0; i < seq && i < this.events.length; i++) n += (this.events[i] as StreamEvent).data.length;
    return n;
  }

  /** The last event is in the log. */
  get ended(): boolean {
    return this.done;
  }

  /**
   * Registers a reader: `onEvent` runs after each batch of new events
   * (and after the end); `read` tells how many bytes of event data it has
   * read (how far behind it is, for the memory bound). Attaching cancels the
   * grace period; the returned function detaches, and the last reader to
   * leave starts it.
   */
  subscribe(onEvent: () => void, read: () => number): () => void {
    this.listeners.set(onEvent, read);
    this.readers++;
    if (this.graceTimer) clearTimeout(this.graceTimer);
    this.graceTimer = null;
    let subscribed = true;
    return () => {
      if (!subscribed) return;
      subscribed = false;
      this.listeners.delete(onEvent);
      this.detach();
    };
  }

  /** Events after `afterSeq`, then the live rest, until the stream ends. */
  async *follow(afterSeq: number): AsyncGenerator<StreamEvent> {
    let wake: (() => void) | null = null;
    let read = this.bytesThrough(afterSeq);
    const unsubscribe = this.subscribe(
      () => wake?.(),
      () => read,
    );
    try {
      let next = afterSeq;
      for (;;) {
        while (next < this.events.length) {
          const e = this.events[next] as StreamEvent;
          next++;
          read += e.data.length;
          yield e;
        }
        const cut = this.cut;
        if (cut !== null) {
          if (next < cut.end) yield cut.event;
          return;
        }
        if (this.done) return;
        await new Promise<void>((resolve) => {
          wake = resolve;
        });
        wake = null;
      }
    } finally {
      unsubscribe();
    }
  }

  /** Ends the stream because the instance is shutting down: an error event saying so, billed for what was relayed. */
  abort(): void {
    this.stopWith(new StreamStoppedError('This gateway instance is shutting down and ended the stream; send the request again (another instance answers it).'));
  }

  /** Bytes the slowest reader has not read; without a reader, all the running stream holds (kept for a resume). */
  backlog(): number {
    if (this.cut !== null) return 0;
    if (this.listeners.size === 0) return this.done ? 0 : this.bufferedBytes + this.unfinishedBytes;
    let least = this.bufferedBytes;
    for (const read of this.listeners.values()) least = Math.min(least, read());
    // An event still arriving is not read by anyone yet.
    return this.bufferedBytes + this.unfinishedBytes - least;
  }

  /**
   * Ends the stream for the memory bound: a running one ends as the
   * per-stream bound ends it (an error event, the upstream aborted, billed
   * from what was relayed), then the log is let go, and every reader that had
   * not read it all gets an error event of the gateway's own (no id: its last
   * event id stays the last event it received) and stops.
   */
  reclaim(message: string): void {
    if (this.cut !== null) return;
    const error = new StreamBoundError(message);
    if (!this.done) this.stopWith(error);
    this.cut = { end: this.events.length, event: { seq: SYNTHETIC_SEQ, kind: 'error', data: streamErrorData(error.message, error.code) } };
    this.events = [];
    this.notify();
    this.releaseMemory();
  }

  /** The gateway ends the stream: its error event, then the upstream call stopped (billed for what was relayed). */
  private stopWith(error: StreamEndedByGateway): void {
    this.end(error);
    this.init.upstream.abort();
  }

  private releaseMemory(): void {
    if (this.hold && this.memory) this.memory.releaseSession(this.hold);
  }

  private detach(): void {
    this.readers--;
    if (this.readers === 0 && this.done) this.releaseMemory();
    if (this.readers > 0 || this.done) return;
    this.graceTimer = setTimeout(() => {
      this.abandoned = true;
      this.init.upstream.abort();
    }, this.init.graceMs);
    this.graceTimer.unref();
  }

  /** The upstream's sink: a chunk arrived. */
  chunk(c: ChatChunk): void {
    if (this.done) return;
    if (this.bufferedBytes > MAX_STREAM_BYTES) {
      // The buffer is bounded: a stream longer than it is stopped rather than grow memory without end.
      this.stopWith(new StreamBoundError(`The gateway ended this stream: it keeps at most ${MAX_STREAM_BYTES / 1024 / 1024} MiB of one stream's events.`));
      return;
    }
    if (c.choices.length === 0 && c.usage) {
      // Some hosts put usage on every chunk: only the last count is sent, once, at the end. The provider's count is
      // what the bill is worked out from (and a count past the cap logged); the client is told what it is billed.
      this.usage = c.usage;
      const prompt = this.init.promptAtMost(c.usage.prompt_tokens);
      const told = usageAtMost(c.usage, prompt, this.init.billedCap(prompt));
      this.usageData = chunkJson(told === c.usage ? c : { ...c, usage: told }, this.init.model);
      this.usageOfWhole = this.answered();
      return;
    }
    this.lastId = c.id;
    this.lastCreated = c.created;
    this.relayedChars += contentChars(c, this.finishedChoices);
    this.push('chunk', chunkJson(c, this.init.model));
  }

  /** The provider's usage chunk, or, when it sent none, one with the counts the stream is billed at. */
  private finalUsageData(): string | null {
    if (this.usageData !== null) return this.usageData;
    if (this.lastId === null) return null;
    const usage = estimatedUsage(this.init.promptTokens, this.relayedChars, this.init.billedCap(this.init.promptTokens));
    const chunk: ChatChunk = { id: this.lastId, object: 'chat.completion.chunk', created: this.lastCreated, model: this.init.model, choices: [], usage };
    return withoutKnownSecrets(JSON.stringify(chunk));
  }

  /** Every choice has its `finish_reason`: nothing of the answer is still to come. */
  private answered(): boolean {
    return this.finishedChoices.size >= this.init.choices;
  }

  /** The upstream's sink: the upstream holds this much of an event not yet ended (told only when large). */
  unfinished(bytes: number): void {
    if (this.done) return;
    const change = bytes - this.unfinishedBytes;
    this.unfinishedBytes = bytes;
    if (this.hold) (this.memory as StreamMemory).add(this.hold, change);
  }

  /** The upstream's sink (and the gateway's own ends): the stream ends, failed or not. */
  end(failure: Error | null): void {
    if (this.done) return;
    if (this.unfinishedBytes !== 0) this.unfinished(0);
    let error = failure;
    let lateFailure: Error | null = null;
    if (error !== null && !(error instanceof StreamEndedByGateway) && !this.abandoned && this.answered()) {
      // The provider failed after its answer was whole (a stall or a reset before [DONE]): nothing is lost, so the
      // stream ends as it would have. A usage from before the last finish is not the whole answer's: estimated instead.
      lateFailure = error;
      error = null;
      if (!this.usageOfWhole) {
        this.usage = null;
        this.usageData = null;
      }
    }
    if (error === null) {
      const usage = this.finalUsageData();
      if (usage !== null) this.push('usage', usage);
      this.push('done', '[DONE]');
    } else {
      this.push(
        'error',
        this.abandoned
          ? streamErrorData('The stream was abandoned by its client and stopped; it cannot be resumed whole.', 'stream_not_found')
          : error instanceof StreamEndedByGateway
            ? streamErrorData(error.message, error.code)
            : upstreamFailure(error),
      );
    }
    this.done = true;
    if (this.graceTimer) clearTimeout(this.graceTimer);
    this.notify();
    if (this.readers === 0) this.releaseMemory();
    this.init.onEnd({ usage: this.usage, relayedChars: this.relayedChars, error, lateFailure, abandoned: this.abandoned });
    this.resolveFinished();
  }

  private push(kind: StreamEventKind, data: string): void {
    this.bufferedBytes += data.length;
    if (this.hold) (this.memory as StreamMemory).add(this.hold, data.length + EVENT_OVERHEAD_BYTES);
    const event = { seq: this.events.length + 1, kind, data };
    this.events.push(event);
    this.init.store.append(this.streamId, event);
    // A microtask runs once the read that brought this event has been parsed whole.
    if (!this.wakeQueued) {
      this.wakeQueued = true;
      queueMicrotask(this.wake);
    }
  }

  private notify(): void {
    for (const listener of this.listeners.keys()) listener();
  }
}

/** Characters the chunk generated; notes in `finished` the choices it ends. */
function contentChars(c: ChatChunk, finished: Set<number>): number {
  let n = 0;
  for (const choice of c.choices) {
    const part = choice as { index?: unknown; delta?: Parameters<typeof generatedChars>[0]; finish_reason?: unknown };
    n += generatedChars(part.delta);
    if (part.finish_reason != null) finished.add(typeof part.index === 'number' ? part.index : 0);
  }
  return n;
}

/** A provider that failed or stalled after its answer began: the variant's code for an upstream failure, or for its timeout. */
function upstreamFailure(error: Error): string {
  const timedOut = error instanceof UpstreamError && error.kind === 'timeout';
  return streamErrorData(`The upstream provider failed mid-stream: ${redactSecrets(error.message)}`, timedOut ? 'upstream_timeout' : 'upstream_failed');
}
