import { H } from '@gw/schema';
import type { FastifyInstance } from 'fastify';
import { GatewayError } from '../../errors/gateway-error.js';
import { enabledModels } from '../model-access.js';
import type { Services } from '../services.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** GET /models: never counted against the rate limit. */
    uncounted?: boolean;
  }
}

/**
 * The per-key sliding window. It runs after authentication (a 401 is never
 * counted) and before body validation, so a bad body is counted; a request
 * naming a model that does not exist for the caller is not (SPEC: Limits).
 */
export function registerRateLimit(app: FastifyInstance, services: Services): void {
  app.addHook('preValidation', async (request, reply) => {
    const key = request.gw.key;
    if (!key || request.routeOptions.config.uncounted) return;
    const model = (request.body as { model?: unknown } | undefined)?.model;
    if (typeof model === 'string' && !(await modelExistsFor(services, request, model))) return;
    const d = await services.limiter.hit(key.id, key.rateLimitRpm, request.id);
    reply.header(H.rateLimitLimit, String(d.limit));
    reply.header(H.rateLimitRemaining, String(d.remaining));
    reply.header(H.rateLimitReset, String(d.resetS));
    reply.header(H.rateLimitEnforced, String(d.enforced));
    if (!d.allowed) throw new GatewayError('rate_limited', `Rate limit exceeded (${d.limit} RPM)`, { retryAfterS: d.resetS });
  });
}

async function modelExistsFor(services: Services, request: Parameters<typeof enabledModels>[1], id: string): Promise<boolean> {
  const m = services.registry.get(id);
  if (!m) return false;
  const enabled = await enabledModels(services, request);
  return enabled === null || enabled.includes(m.id);
}
