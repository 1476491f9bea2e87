import type { FastifyInstance } from 'fastify';
import type { Services } from '../services.js';

/** Liveness, readiness and Prometheus metrics. Not part of the public API; no key needed. */
export function opsRoutes(app: FastifyInstance, services: Services): void {
  const hide = { schema: { hide: true } };
  app.get('/healthz', hide, async () => ({ status: 'ok' }));
  app.get('/readyz', hide, async (_request, reply) => {
    if (services.lifecycle.draining) return reply.code(503).send({ status: 'draining' });
    const store = await services.store.ping().then(
      () => 'ok',
      () => 'unreachable',
    );
    // Ready either way: without Redis the gateway serves on, its limits failing open (the field says so).
    const health = services.redisHealth;
    const redis = health === null ? 'none' : health.reachable && (await health.answers()) ? 'ok' : 'unreachable';
    return { status: 'ready', store, redis, models: services.registry.list().length };
  });
  app.get('/metrics', hide, async (_request, reply) => {
    reply.type(services.metrics.registry.contentType);
    return services.metrics.registry.metrics();
  });
}
