import type { FastifyInstance } from 'fastify';
import { GatewayError } from '../../errors/gateway-error.js';

/**
 * A JSON body declared in a charset other than UTF-8 is refused (415) rather than read as UTF-8: JSON between
 * systems is UTF-8 (RFC 8259), and a Latin-1 'é' read as UTF-8 would reach the provider silently replaced.
 */
export function refuseNonUtf8Json(app: FastifyInstance): void {
  app.addHook('preParsing', (request, _reply, payload, done) => {
    const type = request.headers['content-type'];
    // Most requests name no charset: one substring test, no parsing.
    if (typeof type !== 'string' || !type.toLowerCase().includes('charset')) return done(null, payload);
    const charset = /;\s*charset\s*=\s*"?([^";\s]*)/i.exec(type)?.[1]?.toLowerCase();
    if (!type.toLowerCase().startsWith('application/json') || charset === undefined || charset === 'utf-8' || charset === 'utf8') {
      return done(null, payload);
    }
    done(new GatewayError('unsupported_media_type', `Unsupported charset '${charset.slice(0, 40)}': send the JSON body in UTF-8.`));
  });
}
