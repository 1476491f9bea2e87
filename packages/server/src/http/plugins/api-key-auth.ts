import type { FastifyInstance } from 'fastify';
import { GatewayError } from '../../errors/gateway-error.js';
import type { Services } from '../services.js';

/**
 * Authenticates every request of this context; runs in onRequest so a 401 never reaches the limiter.
 * Callback-style: a cached key (the usual case) is answered without a promise or a microtask hop.
 */
export function registerApiKeyAuth(app: FastifyInstance, services: Services): void {
  app.addHook('onRequest', (request, _reply, done) => {
    let found: ReturnType<Services['auth']['authenticate']>;
    try {
      if (authorizationHeaders(request.raw.rawHeaders) > 1) {
        // Node keeps the first; a proxy in front may read the last: which key is billed must not depend on who reads.
        throw new GatewayError('unauthorized', 'Send exactly one Authorization header.');
      }
      found = services.auth.authenticate(request.headers.authorization);
    } catch (err) {
      return done(err as Error);
    }
    if (!(found instanceof Promise)) {
      request.gw.key = found;
      return done();
    }
    found.then((key) => {
      request.gw.key = key;
      done();
    }, done);
  });
}

/** How many Authorization headers the request carried (names are at the even places of the raw list). */
function authorizationHeaders(raw: string[]): number {
  let n = 0;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i] as string;
    if (name.length === 13 && name.toLowerCase() === 'authorization') n++;
  }
  return n;
}
