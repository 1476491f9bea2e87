import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyBaseLogger } from 'fastify';

/**
 * What the connection has not yet handed to the kernel: Node's queue, and what is left of the write libuv is doing
 * (its handle's writeQueueSize, which goes down as the client takes bytes; writableLength counts that write whole).
 */
function unsent(socket: Socket): number {
  const handle = (socket as Socket & { _handle?: { writeQueueSize?: number } | null })._handle;
  return socket.writableLength + (handle?.writeQueueSize ?? 0);
}

interface Watched {
  /** The request's logger: told when the connection is cut (a logger rather than a callback: no closure per request). */
  log: FastifyBaseLogger;
  /** Bytes unsent at the last look, and when they last went down; null until the answer was seen written whole. */
  left: number | null;
  progressAt: number;
}

/**
 * Closes the connection of an answer, written whole, that its client stops taking (as nginx's send_timeout): once the
 * answer has ended, the bytes still unsent must go down within every `timeoutMs`. A client that never reads would
 * otherwise hold the answer's memory (a 20 MB embeddings answer), its budget hold and its usage record (written when
 * the answer is) for as long as it keeps the connection open. Nothing is judged while the answer is being made (a
 * provider's wait is not the client's), nor for an answer the kernel took at once.
 *
 * One sweep of the answers in flight, a few times per timeout, rather than a listener and a timer per request: the
 * usual answer is taken at once and leaves before any sweep sees it, at the cost of a map's set and delete.
 */
export class UnsentAnswers {
  private readonly open = new Map<ServerResponse, Watched>();
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly timeoutMs: number) {
    this.timer = setInterval(() => this.sweep(), Math.max(100, Math.min(5_000, timeoutMs / 4)));
    this.timer.unref();
  }

  /** Watches `res` until {@link forget}; `log` is told when its connection is closed for want of progress. */
  watch(res: ServerResponse, log: FastifyBaseLogger): void {
    this.open.set(res, { log, left: null, progressAt: 0 });
  }

  forget(res: ServerResponse): void {
    this.open.delete(res);
  }

  close(): void {
    clearInterval(this.timer);
    this.open.clear();
  }

  private sweep(): void {
    const now = Date.now();
    for (const [res, w] of this.open) {
      const socket = res.socket;
      if (!res.writableEnded || res.writableFinished || !socket || socket.destroyed) continue;
      const left = unsent(socket);
      if (w.left === null || left < w.left) {
        w.left = left;
        w.progressAt = now;
      } else if (now - w.progressAt >= this.timeoutMs) {
        this.open.delete(res);
        w.log.info('the client stopped taking its answer for GW_SEND_TIMEOUT_MS: connection closed');
        socket.destroy();
      }
    }
  }
}
