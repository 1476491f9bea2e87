import type { FastifyInstance } from 'fastify';
import type { Services } from '../services.js';

/** Authenticates every request of this context; runs in onRequest so a 401 never reaches the limiter. */
export function registerApiKeyAuth(app: FastifyInstance, services: Services): void {
  app.addHook('onRequest', async (request) => {
    request.gw.key = await services.auth.authenticate(request.headers.authorization);
  });
}
