import { getHeapStatistics } from 'node:v8';
import type { GatewayError } from '../errors/gateway-error.js';
import { AnswerOverBound } from '../errors/out-of-resources.js';
import type { AnswerMemory } from '../providers/http-client.js';

/**
 * The bytes of JSON request bodies, and of the embeddings answers read for them, this instance holds at once, each from
 * its parse (or its arrival from the provider) until its response closes. A request's body is held three or four times
 * over while it runs (its text, the parsed object, the provider's copy): 40 bodies of 4 MB took the process 600 MB past
 * its idle size, and under a heap bound (`--max-old-space-size`, a container's memory) enough of them at once ended it
 * out of memory, every request in flight lost. An embeddings answer is held about as many times over (the provider's
 * bytes, their text, the vectors, the answer written): 20 answers of 2,048 vectors of 1,024 floats (44 MB each) took
 * the process 1.1 GB past its idle size. Past the bound a body is refused (503 `out_of_resources`) rather than held,
 * an answer is not read; a body alone, and an answer while no other is held, is always taken, whatever its size.
 */
export class BodyMemory {
  held = 0;
  /** Requests that hold an answer's bytes. */
  answers = 0;
  /** Answers waiting for room, oldest first: each is tried as bytes are let go, until it takes its room. */
  private readonly waiting: (() => boolean)[] = [];

  /** `answerWaitMs`: how long an answer waits for room before its request is refused (at most {@link ANSWER_ROOM_WAIT_MS}). */
  constructor(
    readonly limit: number,
    readonly answerWaitMs = ANSWER_ROOM_WAIT_MS,
  ) {}

  take(bytes: number): boolean {
    if (this.held > 0 && this.held + bytes > this.limit) return false;
    this.held += bytes;
    return true;
  }

  /**
   * An answer's `bytes` for a request whose answers hold `own` already: taken where they fit, or where no other request
   * holds an answer, so that one answer always goes on, however large, whatever bodies other requests hold.
   */
  holdAnswer(own: number, bytes: number): boolean {
    if (this.held + bytes > this.limit && this.answers > (own === 0 ? 0 : 1)) return false;
    if (own === 0) this.answers++;
    this.held += bytes;
    return true;
  }

  /** A request's body bytes and its answers' (`answerBytes`), let go as its response closes. */
  release(bytes: number, answerBytes = 0): void {
    this.held -= bytes + answerBytes;
    if (answerBytes > 0) this.answers--;
    if (this.waiting.length > 0) this.wake();
  }

  /** `tryHold` tried again as bytes are let go, in turn behind the answers waiting before it; the function returned stops it. */
  whenFreed(tryHold: () => boolean): () => void {
    this.waiting.push(tryHold);
    return () => {
      const at = this.waiting.indexOf(tryHold);
      if (at === -1) return;
      this.waiting.splice(at, 1);
      // The first in line gone, the next may fit.
      if (at === 0) this.wake();
    };
  }

  /** First come, first held: a small answer does not pass a large one for good. */
  private wake(): void {
    while (this.waiting.length > 0 && (this.waiting[0] as () => boolean)()) this.waiting.shift();
  }
}

/**
 * How long an answer waits for room before its request is refused 503, or GW_SEND_TIMEOUT_MS where shorter: answers
 * ahead of it wait only for their clients to take them, which that bounds, so a wait this long means the instance is
 * past its load.
 */
export const ANSWER_ROOM_WAIT_MS = 30_000;

/**
 * A request's answers' share of {@link BodyMemory}, as its `answerBytes` counts it: let go with its body's when its
 * response closes (request-context.ts), since an answer is held until it is sent.
 */
export class RequestMemory implements AnswerMemory {
  constructor(
    private readonly memory: BodyMemory,
    private readonly gw: { answerBytes: number },
  ) {}

  hold(bytes: number): boolean {
    if (bytes === 0) return true;
    if (!this.memory.holdAnswer(this.gw.answerBytes, bytes)) return false;
    this.gw.answerBytes += bytes;
    return true;
  }

  holdWhenFree(bytes: number, taken: () => void, refused: () => void): () => void {
    // A request holding part of an answer (a provider's earlier batch) waits for no other: two such requests would
    // each wait for the other to let go.
    if (this.gw.answerBytes > 0) {
      refused();
      return () => {};
    }
    const timer = setTimeout(() => {
      stop();
      refused();
    }, this.memory.answerWaitMs);
    const stop = this.memory.whenFreed(() => {
      if (!this.hold(bytes)) return false;
      clearTimeout(timer);
      // Called from a release, itself in a response's 'close': the reading resumes on a turn of its own.
      setImmediate(taken);
      return true;
    });
    return () => {
      clearTimeout(timer);
      stop();
    };
  }

  refusal(): GatewayError {
    return new AnswerOverBound(this.memory.held, this.memory.limit);
  }
}

/** GW_BODY_MEMORY_MB in bytes; 0: a sixteenth of V8's heap limit, at four copies a quarter of the heap. */
export function bodyMemoryBytes(mb: number): number {
  return mb > 0 ? mb * 1024 * 1024 : Math.floor(getHeapStatistics().heap_size_limit / 16);
}
