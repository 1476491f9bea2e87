import type { Variant } from '@gw/schema';
import type { FastifyBaseLogger } from 'fastify';
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
    const ms = performance.now() - a.startedAt;
    this.metrics.observeRequest('unmatched', a.variant, a.status, ms / 1000);
    this.log?.info(
      {
        reqId: a.requestId,
        ...(a.url === undefined ? {} : { req: { method: a.method, url: a.url } }),
        res: { statusCode: a.status },
        responseTime: ms,
      },
      'request completed: answered before it reached a route',
    );
  }
}
