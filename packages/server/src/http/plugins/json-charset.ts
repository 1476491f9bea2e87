import type { FastifyInstance } from 'fastify';
import { GatewayError } from '../../errors/gateway-error.js';

/**
 * A JSON body declared in a charset other than UTF-8 is refused (415) rather than read as UTF-8: JSON between
 * systems is UTF-8 (RFC 8259), and a Latin-1 'é' read as UTF-8 would reach the provider silently replaced.
 * Checked in the scope's JSON parser, which every JSON request goes through anyway: a hook of its own cost
 * a request about 2 % more CPU at saturation (bench/ab.mjs).
 */
export function refuseNonUtf8Json(app: FastifyInstance): void {
  // Fastify's own JSON parser, with its defaults (a prototype-poisoning key is an error).
  const parseJson = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    const charset = declaredCharset(request.headers['content-type']);
    if (charset !== null && charset !== 'utf-8' && charset !== 'utf8') {
      done(new GatewayError('unsupported_media_type', `Unsupported charset '${charset.slice(0, 40)}': send the JSON body in UTF-8.`), undefined);
      return;
    }
    void parseJson(request, body as string, done);
  });
}

/** The charset a Content-Type names, lower-cased; null when it names none (most requests: one substring test). */
function declaredCharset(type: string | undefined): string | null {
  if (type === undefined || !type.toLowerCase().includes('charset')) return null;
  return /;\s*charset\s*=\s*"?([^";\s]*)/i.exec(type)?.[1]?.toLowerCase() ?? null;
}
