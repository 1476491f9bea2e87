import type { IncomingHttpHeaders } from 'node:http';
import type { FastifyInstance } from 'fastify';
import { GatewayError } from '../errors/gateway-error.js';
import { encodedBodyError, unsupportedJsonType } from './errors.js';
import { boundaryOf } from './multipart-spool.js';

/**
 * The media type a scope's routes read their bodies in, and how its parser refuses a body it will not read. A scope
 * declares it where it registers its parser (readsBodiesAs), so that a request sent with `Expect: 100-continue` is
 * refused before its body is asked for in the words the route would use once the body came (expect-continue.ts).
 */
export interface BodyMedia {
  /** Lower case, without parameters. */
  type: string;
  /** The refusal of a body in another media type (or without one). */
  unsupported(headers: IncomingHttpHeaders): GatewayError;
  /** The refusal of a body of this type the parser will still not read (compressed, in a charset not taken, a form without its boundary), or null. */
  encoded(headers: IncomingHttpHeaders): GatewayError | null;
  /** Whether the route refuses a declared size over its limit before such a body (a JSON body is read whole first). */
  sizeFirst: boolean;
}

export const JSON_BODY: BodyMedia = {
  type: 'application/json',
  unsupported: unsupportedJsonType,
  encoded: (headers) => unsupportedCharset(headers['content-type']) ?? encodedBodyError(headers),
  sizeFirst: true,
};

export const FORM_BODY: BodyMedia = {
  type: 'multipart/form-data',
  unsupported: unsupportedFormType,
  // A form without a boundary cannot be read either: refused as its media type, from the headers, so before a 100 too.
  encoded: (headers) => (boundaryOf(headers['content-type']) === null ? unsupportedFormType(headers) : encodedBodyError(headers)),
  sizeFirst: false,
};

/** The transcription route's refusal of any Content-Type but a form with its boundary (one Fastify cannot parse too). */
function unsupportedFormType(headers: IncomingHttpHeaders): GatewayError {
  const declared = (headers['content-type'] ?? '').slice(0, 100);
  return new GatewayError(
    'unsupported_media_type',
    `Unsupported Content-Type '${declared}': send multipart/form-data with its boundary (multipart/form-data; boundary=...).`,
  );
}

/** Fastify reads no body of these methods, whatever the route. */
const BODYLESS = new Set(['GET', 'HEAD', 'TRACE']);

/** `METHOD /full/path` of every route that reads a body, and its media. The routes are the same for every gateway in a process. */
const byRoute = new Map<string, BodyMedia>();

/**
 * Records `media` for every route added to `scope` from now on. A nested scope that declares its own (the transcription
 * route's form) overrides its parent's for its routes: Fastify runs the parent's onRoute hooks first.
 */
export function readsBodiesAs(scope: FastifyInstance, media: BodyMedia): void {
  scope.addHook('onRoute', (route) => {
    for (const method of [route.method].flat()) if (!BODYLESS.has(method)) byRoute.set(`${method} ${route.url}`, media);
  });
}

/** The media of the route that takes `method path`, when it reads a body; undefined otherwise (no such route, or a GET). */
export function bodyMediaOf(method: string, path: string): BodyMedia | undefined {
  return byRoute.get(`${method} ${path}`);
}

/**
 * The refusal a route gives these headers' body, decided from the headers alone, in the route's order (its media type,
 * then the declared size and the encoding in the order its parser checks them); null when the body is to be read.
 * `tooLarge`: the declared size's refusal, if any.
 */
export function bodyRefusal(media: BodyMedia, headers: IncomingHttpHeaders, tooLarge: GatewayError | null): GatewayError | null {
  if (!takes(media.type, headers)) return media.unsupported(headers);
  return media.sizeFirst ? (tooLarge ?? media.encoded(headers)) : (media.encoded(headers) ?? tooLarge);
}

/**
 * Whether Fastify gives a body with these headers to the parser of `type`: its media type (before any parameter, trimmed,
 * in any case) is that one; with no Content-Type, only when there is no body to parse.
 */
function takes(type: string, headers: IncomingHttpHeaders): boolean {
  const declared = headers['content-type'];
  if (declared === undefined) {
    const length = headers['content-length'];
    return headers['transfer-encoding'] === undefined && (length === undefined || length === '0');
  }
  const end = declared.indexOf(';');
  return (end === -1 ? declared : declared.slice(0, end)).trim().toLowerCase() === type;
}

/**
 * A JSON body declared in a charset other than UTF-8 is refused (415) rather than read as UTF-8: JSON between
 * systems is UTF-8 (RFC 8259), and a Latin-1 'é' read as UTF-8 would reach the provider silently replaced.
 */
export function unsupportedCharset(contentType: string | undefined): GatewayError | null {
  const charset = declaredCharset(contentType);
  if (charset === null || charset === 'utf-8' || charset === 'utf8') return null;
  return new GatewayError('unsupported_media_type', `Unsupported charset '${charset.slice(0, 40)}': send the JSON body in UTF-8.`);
}

/** The charset a Content-Type names, lower-cased; null when it names none (most requests: one substring test). */
function declaredCharset(type: string | undefined): string | null {
  if (type === undefined || !type.toLowerCase().includes('charset')) return null;
  return /;\s*charset\s*=\s*"?([^";\s]*)/i.exec(type)?.[1]?.toLowerCase() ?? null;
}
