import { H, type Strategy } from '@gw/schema';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { UpstreamError } from '../errors/upstream-error.js';
import type { ProviderAdapter } from '../providers/types.js';
import type { Offer } from '../routing/registry.js';
import type { Services } from './services.js';

/** Calls one offer's adapter, timing it as upstream time. */
export async function callUpstream<T>(services: Services, request: FastifyRequest, offer: Offer, fn: (adapter: ProviderAdapter) => Promise<T>): Promise<T> {
  const adapter = services.adapters.get(offer.provider);
  if (!adapter) throw new UpstreamError({ kind: 'connect', provider: offer.provider, message: `no adapter for ${offer.provider}` });
  const started = performance.now();
  let outcome = 'ok';
  try {
    return await fn(adapter);
  } catch (err) {
    outcome = err instanceof UpstreamError ? err.kind : 'error';
    throw err;
  } finally {
    const ms = performance.now() - started;
    request.gw.upstreamMs += ms;
    services.metrics.upstream.observe({ provider: offer.provider, outcome }, ms / 1000);
  }
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
