import { isUtf8 } from 'node:buffer';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { GatewayError, SEND_AGAIN } from '../../errors/gateway-error.js';
import { nestsDeeperThan } from '../../lib/json-depth.js';
import { exactIntegers, holdsInexactNumber, infiniteNumberPath } from '../../lib/json-numbers.js';
import { JSON_BODY, readsBodiesAs, unsupportedCharset } from '../body-media.js';
import type { BodyMemory } from '../body-memory.js';
import { encodedBodyError, nestedTooDeeply } from '../errors.js';

/**
 * The deepest nesting of arrays and objects parsed. JSON.parse takes about a microsecond a level: a 4 MB body of '['
 * held the event loop, and every other client, for seconds (twice over when unclosed, see invalidJson). Deeper than
 * a few thousand levels a body could not be passed on anyway (nestedTooDeeply). A body of no more bytes cannot nest
 * deeper, so most requests are not scanned.
 */
const MAX_JSON_DEPTH = 10_000;

/**
 * A JSON body declared in a charset other than UTF-8 is refused (415) rather than read as UTF-8 (unsupportedCharset).
 * Checked in the scope's JSON parser, which every JSON request goes through anyway: a hook of its own cost
 * a request about 2 % more CPU at saturation (bench/ab.mjs).
 * `emptyIsNoBody`: a labelled body with nothing in it is read as no body (the admin API's revoke and rebuild). A body is
 * held against `bodyMemory` until its response closes (request-context.ts lets it go).
 */
export function refuseNonUtf8Json(app: FastifyInstance, bodyMemory: BodyMemory, options: { emptyIsNoBody?: boolean } = {}): void {
  const emptyIsNoBody = options.emptyIsNoBody === true;
  // Fastify's own JSON parser, with its defaults (a prototype-poisoning key is an error).
  const parseJson = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser(JSON_BODY.type);
  readsBodiesAs(app, JSON_BODY);
  // As bytes: decoded as text, bytes that are not UTF-8 (a Latin-1 body sent without its charset) would become U+FFFD
  // unseen. Checking them costs about 0.1 µs a request.
  app.addContentTypeParser(JSON_BODY.type, { parseAs: 'buffer' }, (request, bytes, done) => {
    if (emptyIsNoBody && (bytes as Buffer).length === 0) {
      done(null, undefined);
      return;
    }
    const charset = unsupportedCharset(request.headers['content-type']);
    if (charset !== null) {
      done(refusal(request, charset));
      return;
    }
    // A body declared encoded (Content-Encoding, or a Transfer-Encoding coding besides chunked) is refused as such (415),
    // whether or not its bytes happen to parse: not read as JSON that is not valid, or as UTF-8 that is not.
    const headers = request.headers;
    if (headers['content-encoding'] !== undefined || (headers['transfer-encoding'] !== undefined && headers['transfer-encoding'] !== 'chunked')) {
      const encoded = encodedBodyError(headers);
      if (encoded) {
        done(refusal(request, encoded));
        return;
      }
    }
    if (!isUtf8(bytes as Buffer)) {
      done(refusal(request, notUtf8()));
      return;
    }
    if ((bytes as Buffer).length > MAX_JSON_DEPTH && nestsDeeperThan(bytes as Buffer, MAX_JSON_DEPTH)) {
      done(refusal(request, nestedTooDeeply()));
      return;
    }
    if (!bodyMemory.take((bytes as Buffer).length)) {
      done(refusal(request, bodiesOverBound(bodyMemory)));
      return;
    }
    request.gw.bodyBytes = (bytes as Buffer).length;
    const body = (bytes as Buffer).toString('utf8');
    void parseJson(request, body, (err, value) => {
      if (err) done(refusal(request, isInvalidJson(err) ? invalidJson(body) : err));
      else if (holdsInexactNumber(value)) readNumbersAsWritten(request, body, value as Record<string, unknown>, done);
      else done(null, value);
    });
  });
}

/**
 * A body with a number JSON.parse did not read as written (lib/json-numbers.ts): one past a double's range is refused
 * naming its field, as it would reach the provider as null; integers past 2^53 are told as written, for a route that passes them on (chat).
 */
function readNumbersAsWritten(request: FastifyRequest, text: string, value: Record<string, unknown>, done: (err: Error | null, body?: unknown) => void): void {
  const infinite = infiniteNumberPath(value);
  if (infinite !== null) {
    const message = `Invalid body: '${infinite}' is a number beyond the range of a double (±1.8e308), which cannot be read as written.`;
    done(refusal(request, new GatewayError('validation', message, { param: infinite })));
    return;
  }
  const read = exactIntegers(text, value);
  request.gw.exactIntegers = read.integers;
  done(null, read.body);
}

/** A body past the instance's bound of bodies held at once: a retry finds room once some requests end. */
function bodiesOverBound(bodyMemory: BodyMemory): GatewayError {
  const mb = (n: number) => (n / 1024 / 1024).toFixed(1);
  return new GatewayError(
    'out_of_resources',
    `This gateway instance holds ${mb(bodyMemory.held)} MiB of request bodies, its bound of ${mb(bodyMemory.limit)} MiB (GW_BODY_MEMORY_MB)${SEND_AGAIN}`,
    { retryAfterS: 1 },
  );
}

/**
 * A body refused, unless no route takes the request: a DELETE labelled JSON with nothing after it, or a PUT whose
 * body does not parse, is the 405 or 404 of its path, not a 400 asking for a JSON object the path would not take.
 */
function refusal(request: FastifyRequest, err: Error): Error | null {
  return request.is404 ? null : err;
}

function isInvalidJson(err: Error): boolean {
  return (err as { code?: string }).code === 'FST_ERR_CTP_INVALID_JSON_BODY';
}

/**
 * Why a body Fastify's parser refused is refused: JSON's own error, with its position (the parser gives no detail),
 * or, for valid JSON, the prototype-poisoning key it holds. Only on this path: a body that parses costs nothing more.
 */
function invalidJson(body: string): GatewayError {
  try {
    JSON.parse(body);
  } catch (err) {
    return new GatewayError('validation', `The request body is not valid JSON: ${(err as Error).message}.`);
  }
  return new GatewayError(
    'validation',
    "The request body holds a '__proto__' key or a 'constructor' with a 'prototype' key, which this gateway refuses anywhere in a body.",
  );
}

/** A body that is not UTF-8 (a Latin-1 or Windows-1252 body sent as UTF-8): refused, where it would reach the model garbled. */
function notUtf8(): GatewayError {
  return new GatewayError('validation', 'The request body is not valid UTF-8: send the JSON body in UTF-8 (RFC 8259), with no other encoding.');
}
