import { H } from '@gw/schema';
import type { FastifyInstance } from 'fastify';
import { lingerOnClose } from '../lingering-close.js';
import type { Services } from '../services.js';

/**
 * Every request gets our own X-Request-Id, a state object, a Server-Timing
 * header that splits the gateway's own time from the upstream's, and a
 * line in the metrics.
 */
export function registerRequestContext(app: FastifyInstance, services: Services): void {
  app.decorateRequest('gw', null as never);
  app.addHook('onRequest', async (request, reply) => {
    request.gw = { variant: 'a', startedAt: performance.now(), upstreamMs: 0, upstreamCalls: 0, key: null, usage: null, errorCode: null, reservation: null };
    reply.header(H.requestId, request.id);
    services.lifecycle.inFlight++;
    reply.raw.once('close', () => {
      services.lifecycle.inFlight--;
    });
  });
  app.addHook('onSend', async (request, reply, payload) => {
    const total = performance.now() - request.gw.startedAt;
    const upstream = request.gw.upstreamMs;
    reply.header(H.serverTiming, `gw;desc="gateway";dur=${(total - upstream).toFixed(2)}, upstream;dur=${upstream.toFixed(2)}, total;dur=${total.toFixed(2)}`);
    // While draining, close each connection after its answer so shutdown is not held by keep-alive;
    // and an answer given before its request's body ended (a refused upload) closes rather than reads the rest.
    const bodyUnread = !request.raw.complete;
    if (bodyUnread) lingerOnClose(request.raw);
    if (services.lifecycle.draining || bodyUnread) reply.header('connection', 'close');
    return payload;
  });
  app.addHook('onResponse', async (request, reply) => {
    const route = request.routeOptions.url ?? 'unmatched';
    services.metrics.observeRequest(route, request.gw.variant, reply.statusCode, (performance.now() - request.gw.startedAt) / 1000);
  });
}
