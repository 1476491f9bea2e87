import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyBaseLogger } from 'fastify';
import { kStreamWhole } from '../streaming/live-frames.js';

/**
 * What the kernel has taken of the connection's writes: what Node handed to libuv less what is left of the write
 * libuv is doing (its handle's writeQueueSize, which goes down as the client takes bytes). It grows while the client
 * takes its answer, also while a stream behind on its client writes more as its socket drains.
 */
function taken(socket: Socket): number {
  return ((socket as Socket & { _bytesDispatched?: number })._bytesDispatched ?? 0) - inLibuv(socket);
}

/** What is left of the write libuv is doing on the connection (its handle's writeQueueSize). */
function inLibuv(socket: Socket): number {
  return (socket as Socket & { _handle?: { writeQueueSize?: number } | null })._handle?.writeQueueSize ?? 0;
}

/**
 * Set on a response paced by its client alone, whether or not it is whole: a resume read from the shared buffer,
 * which holds a Redis connection of its own while it waits for the client to take more.
 */
export const kPacedByClient = Symbol('gw.pacedByClient');

type Marked = ServerResponse & { [kStreamWhole]?: boolean; [kPacedByClient]?: boolean };

/** The answer is written whole (a stream: ended, its client behind), only its taking is left. */
function whole(res: ServerResponse): boolean {
  return res.writableEnded || (res as Marked)[kStreamWhole] === true;
}

/** Bytes of the answer wait for the client: in Node's buffer, or in libuv's queue behind a full kernel buffer. */
function waiting(socket: Socket): boolean {
  return socket.writableLength > 0 || inLibuv(socket) > 0;
}

/** An answer in flight, linked into the watch's list (no map keyed by the response: see {@link UnsentAnswers}). */
export interface Watched {
  readonly res: ServerResponse;
  /** The request's logger: told when the connection is cut (a logger rather than a callback: no closure per request). */
  readonly log: FastifyBaseLogger;
  /** Bytes the kernel had taken at the last look, and when they last grew; null until the answer was seen written whole. */
  taken: number | null;
  progressAt: number;
  prev: Watched | null;
  next: Watched | null;
  linked: boolean;
}

/**
 * Closes the connection of an answer, written whole, that its client stops taking (as nginx's send_timeout): once the
 * answer has ended (a stream: once it ended upstream, its events waiting for a client behind on them), the kernel must
 * take more of it within every `timeoutMs`. A client that never reads would
 * otherwise hold the answer's memory (a 20 MB embeddings answer), its budget hold and its usage record (written when
 * the answer is) for as long as it keeps the connection open. Nothing is judged while the answer is being made (a
 * provider's wait is not the client's), nor for an answer the kernel took at once.
 *
 * One sweep of the answers in flight, a few times per timeout, rather than a listener and a timer per request: the
 * usual answer is taken at once and leaves before any sweep sees it. The answers are a linked list whose entry the
 * request keeps, not a Map or Set keyed by the response: giving Node's ServerResponse an identity hash (what a Map key
 * needs) cost every request about 15 % more CPU in the bench (bench/ab.mjs, five rounds), as Node's own code on the
 * response then ran slower.
 */
export class UnsentAnswers {
  private head: Watched | null = null;
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly timeoutMs: number) {
    this.timer = setInterval(() => this.sweep(), Math.max(100, Math.min(5_000, timeoutMs / 4)));
    this.timer.unref();
  }

  /** Watches `res` until {@link forget} is given the entry returned; `log` is told if its connection is cut for want of progress. */
  watch(res: ServerResponse, log: FastifyBaseLogger): Watched {
    const w: Watched = { res, log, taken: null, progressAt: 0, prev: null, next: this.head, linked: true };
    if (this.head !== null) this.head.prev = w;
    this.head = w;
    return w;
  }

  forget(w: Watched): void {
    if (!w.linked) return;
    w.linked = false;
    if (w.prev !== null) w.prev.next = w.next;
    else this.head = w.next;
    if (w.next !== null) w.next.prev = w.prev;
    w.prev = null;
    w.next = null;
  }

  close(): void {
    clearInterval(this.timer);
    while (this.head !== null) this.forget(this.head);
  }

  private sweep(): void {
    const now = Date.now();
    for (let w = this.head; w !== null; ) {
      const next = w.next;
      const { res } = w;
      const socket = res.socket;
      const isWhole = whole(res);
      if ((isWhole || (res as Marked)[kPacedByClient] === true) && !res.writableFinished && socket && !socket.destroyed) {
        const took = taken(socket);
        // One paced by its client but not whole is judged only while something waits for the client: a silence is not its.
        if (w.taken === null || took > w.taken || (!isWhole && !waiting(socket))) {
          w.taken = took;
          w.progressAt = now;
        } else if (now - w.progressAt >= this.timeoutMs) {
          this.forget(w);
          w.log.info('the client stopped taking its answer for GW_SEND_TIMEOUT_MS: connection closed');
          socket.destroy();
        }
      }
      w = next;
    }
  }
}
