import { H, type Strategy } from '@gw/schema';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { UpstreamError } from '../errors/upstream-error.js';
import type { ProviderAdapter } from '../providers/types.js';
import type { LatencyMode, OfferStats } from '../routing/offer-stats.js';
import type { Offer } from '../routing/registry.js';
import type { Services } from './services.js';

/**
 * Calls one offer's adapter, timing it as upstream time, and teaches the
 * router what the attempt showed: its latency (for a stream the call ends
 * at the first chunk, so that is time to first token) and whether the
 * offer answered, failed or timed out.
 */
export async function callUpstream<T>(services: Services, request: FastifyRequest, offer: Offer, fn: (adapter: ProviderAdapter) => Promise<T>): Promise<T> {
  const adapter = services.adapters.get(offer.provider);
  if (!adapter) throw new UpstreamError({ kind: 'connect', provider: offer.provider, message: `no adapter for ${offer.provider}` });
  const stats = services.offerStats;
  const mode = streams(request) ? 'stream' : 'full';
  request.gw.upstreamCalls++;
  stats.started(offer);
  const started = performance.now();
  let outcome = 'ok';
  try {
    const value = await fn(adapter);
    stats.record(offer, 'ok', performance.now() - started, mode);
    return value;
  } catch (err) {
    outcome = err instanceof UpstreamError ? err.kind : 'error';
    learnFromFailure(stats, offer, err, performance.now() - started, mode);
    throw err;
  } finally {
    const ms = performance.now() - started;
    request.gw.upstreamMs += ms;
    services.metrics.observeUpstream(offer.provider, outcome, ms / 1000);
  }
}

function streams(request: FastifyRequest): boolean {
  const body = request.body as { stream?: unknown } | null | undefined;
  return typeof body === 'object' && body !== null && body.stream === true;
}

/** Only the provider's own faults (those that fail over) count against it; a refused request or a client that left says nothing. */
function learnFromFailure(stats: OfferStats, offer: Offer, err: unknown, ms: number, mode: LatencyMode): void {
  if (!(err instanceof UpstreamError) || !err.retryable) stats.abandoned(offer);
  else stats.record(offer, err.kind === 'timeout' ? 'timeout' : 'error', ms, mode);
}

/** Aborts upstream work when the client goes away before the answer. */
export function clientAbortSignal(reply: FastifyReply): AbortSignal {
  const controller = new AbortController();
  reply.raw.once('close', () => {
    if (!reply.raw.writableFinished) controller.abort();
  });
  return controller.signal;
}

export function setRoutingHeaders(reply: FastifyReply, request: FastifyRequest, offer: Offer, strategy: Strategy, hops: number): void {
  reply.header(H.provider, offer.provider);
  if (request.gw.variant === 'b') {
    reply.header(H.region, offer.region);
    reply.header(H.strategy, strategy);
    reply.header(H.routingHops, String(hops));
  }
}
