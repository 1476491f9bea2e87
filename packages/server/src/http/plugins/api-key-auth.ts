import type { FastifyInstance } from 'fastify';
import { refuseDoubleAuthorization } from '../../auth/admin-token.js';
import { keyElsewhereError } from '../../auth/api-keys.js';
import type { Services } from '../services.js';

/**
 * Authenticates every request of this context; runs in onRequest so a 401 never reaches the limiter.
 * Callback-style: a cached key (the usual case) is answered without a promise or a microtask hop.
 */
export function registerApiKeyAuth(app: FastifyInstance, services: Services): void {
  app.addHook('onRequest', (request, _reply, done) => {
    let found: ReturnType<Services['auth']['authenticate']>;
    try {
      refuseDoubleAuthorization(request.raw.rawHeaders);
      found = services.auth.authenticate(request.headers.authorization);
    } catch (err) {
      // No Authorization: a key sent where it is not read (another header, the URL) is named as such.
      return done((request.headers.authorization === undefined && keyElsewhereError(request.headers, request.url)) || (err as Error));
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
