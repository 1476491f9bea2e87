import type { FastifyInstance } from 'fastify';
import { waitAtMost } from '../../lib/wait-at-most.js';
import type { Services } from '../services.js';

/**
 * How long /readyz waits for the store and for Redis, asked at once: under a
 * Kubernetes probe's default 1 s timeout, so a stalled database or Redis makes
 * the answer say `unreachable` rather than fail every instance's probe at once.
 */
const READY_CHECK_MS = 500;

/** Liveness, readiness and Prometheus metrics. Not part of the public API; no key needed. */
export function opsRoutes(app: FastifyInstance, services: Services): void {
  const hide = { schema: { hide: true } };
  app.get('/healthz', hide, async () => ({ status: 'ok' }));
  app.get('/readyz', hide, async (_request, reply) => {
    if (services.lifecycle.draining) return reply.code(503).send({ status: 'draining' });
    // Ready either way: without its store the gateway serves from its caches, and without Redis its limits fail open (the fields say so).
    const health = services.redisHealth;
    const [store, redis] = await Promise.all([
      answersWithin(
        services.store.ping().then(() => true),
        READY_CHECK_MS,
      ),
      health === null ? null : health.reachable ? answersWithin(health.answers(), READY_CHECK_MS) : false,
    ]);
    return {
      status: 'ready',
      store: store ? 'ok' : 'unreachable',
      redis: redis === null ? 'none' : redis ? 'ok' : 'unreachable',
      models: services.registry.list().length,
      // A provider whose model list the last rebuild could not read: served by its last known list, or not at all.
      modelLists: services.registry.failingLists(),
    };
  });
  app.get('/metrics', hide, async (_request, reply) => {
    reply.type(services.metrics.registry.contentType);
    return services.metrics.registry.metrics();
  });
}

/** What `check` says within `ms`; false if it fails or says nothing by then (it goes on after, its result unread). */
async function answersWithin(check: Promise<boolean>, ms: number): Promise<boolean> {
  let answer = false;
  await waitAtMost(
    check.then(
      (ok) => {
        answer = ok;
      },
      () => {},
    ),
    ms,
  );
  return answer;
}
