import type { IncomingMessage } from 'node:http';
import type { Variant } from '@gw/schema';
import type { FastifyBaseLogger } from 'fastify';
import { newRequestId } from '../lib/ids.js';
import { variantOfUrl } from './framework-errors.js';
import type { Metrics } from './metrics.js';

/** An answer the gateway wrote without a Fastify request (Node asked for it before there was one). */
export interface RawAnswer {
  requestId: string;
  status: number;
  variant: Variant;
  /** performance.now() when the gateway began on it. */
  startedAt: number;
  /** The request line, when its head was read. */
  method?: string | undefined;
  url?: string | undefined;
}

/**
 * Counts and logs the answers written outside Fastify (a 400 for framing Node's parser refuses, a 431, a 408 before a
 * request's head was whole, a 417, a CONNECT's 405), so that every answer is in /metrics and the log once, as the
 * routes' are: under route `unmatched` (no route took it), with the request id its client got in X-Request-Id.
 */
export class RawAnswers {
  private log: FastifyBaseLogger | null = null;

  constructor(private readonly metrics: Metrics) {}

  /** The app's logger, known once Fastify is built (the answers are counted before that too: there are none). */
  logTo(log: FastifyBaseLogger): void {
    this.log = log;
  }

  answered(a: RawAnswer): void {
    this.count(a, 'request completed: answered before it reached a route');
  }

  /**
   * A request Node read whose connection was closed before it reached the routes (its client gone while `Expect`'s
   * checks ran, or the rest of a read after the gateway closed the connection): never started, nothing answered, so
   * a 499 as any request whose client left before its answer, under `unmatched`, with an id of its own for the log.
   */
  notStarted(req: IncomingMessage): void {
    const url = req.url ?? '';
    const a = { requestId: newRequestId(), status: 499, variant: variantOfUrl(url), startedAt: performance.now(), method: req.method, url };
    this.count(a, 'request completed: its connection closed before it reached a route');
  }

  private count(a: RawAnswer, msg: string): void {
    const ms = performance.now() - a.startedAt;
    this.metrics.observeRequest('unmatched', a.variant, a.status, ms / 1000);
    this.log?.info(
      {
        reqId: a.requestId,
        ...(a.url === undefined ? {} : { req: { method: a.method, url: a.url } }),
        res: { statusCode: a.status },
        responseTime: ms,
      },
      msg,
    );
  }
}
