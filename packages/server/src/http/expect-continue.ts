import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { H } from '@gw/schema';
import type { ApiKeyAuthenticator } from '../auth/api-keys.js';
import type { GatewayConfig } from '../config/index.js';
import { GatewayError, isGatewayError } from '../errors/gateway-error.js';
import { newRequestId } from '../lib/ids.js';
import type { LimitDecision, RateLimiter } from '../limits/types.js';
import type { ApiKeyRecord } from '../store/types.js';
import { bodyMediaOf, bodyRefusal } from './body-media.js';
import { bodyTooLarge, errorEnvelope } from './errors.js';
import { variantOfUrl } from './framework-errors.js';
import { hostError } from './host-header.js';
import { lingerOnClose } from './lingering-close.js';
import { declaredTooLarge, isMultipart, tooLarge } from './multipart-spool.js';
import { rateLimitedError, rateLimitHeaders } from './plugins/rate-limit.js';
import type { RawAnswers } from './raw-answers.js';
import { pendingRouteError } from './routes/not-implemented.js';
import { serverTiming } from './server-timing.js';

/** A refusal, with the limiter's decision when the request met the limiter (its X-RateLimit-* headers go with it). */
interface Refusal {
  error: GatewayError;
  limit: LimitDecision | null;
}

/** A refusal decided before the body was asked for, handed to the routes' first hook (request-context.ts) to answer. */
export interface RefusedBeforeContinue {
  error: GatewayError;
  /** When the request's head arrived: its Server-Timing and logged time include the checks made before it reached Fastify. */
  startedAt: number;
}

const kRefused = Symbol('gw.refusedBeforeContinue');
type RefusableRequest = IncomingMessage & { [kRefused]?: RefusedBeforeContinue };

/** The refusal checkContinue decided for this request, if any. */
export function refusedBeforeContinue(req: IncomingMessage): RefusedBeforeContinue | undefined {
  return (req as RefusableRequest)[kRefused];
}

/**
 * `Expect: 100-continue` (curl sends it for any body over 1 MB, and for every form): the Host, the key, the
 * body's media type and encoding, the declared size and, for an upload, the key's rate-limit window are
 * checked before the client is told to send its body, so a wrong key, a body the route would refuse as
 * it is labelled, a file over the limit or an upload of a key over its limit is refused without the
 * upload. Node would otherwise answer 100 at once.
 */
export function checkBeforeContinue(server: Server, auth: ApiKeyAuthenticator, limiter: RateLimiter, config: GatewayConfig, observe: RawAnswers): void {
  // An expectation other than 100-continue cannot be met (RFC 9110: 417), answered in the envelope rather than Node's bare 417.
  server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => {
    const refused = new GatewayError('validation', `The Expect header '${String(req.headers.expect).slice(0, 80)}' cannot be met: only 100-continue is.`);
    refuse417(req, res, refused, performance.now(), observe);
  });
  server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
    const startedAt = performance.now();
    void refusal(req, auth, limiter, config, newRequestId()).then((refused) => {
      // A refusal is answered by the routes, without the 100, as every other answer is: so it is counted in /metrics under
      // its route, logged with the request id the client gets, and carries the same headers as without Expect.
      if (refused) (req as RefusableRequest)[kRefused] = { error: withLimitHeaders(refused), startedAt };
      else res.writeContinue();
      server.emit('request', req, res);
    });
  });
}

async function refusal(
  req: IncomingMessage,
  auth: ApiKeyAuthenticator,
  limiter: RateLimiter,
  config: GatewayConfig,
  requestId: string,
): Promise<Refusal | null> {
  // Before the key, as request-context.ts checks it: on every path, never counted.
  const badHost = hostError(req);
  if (badHost !== null) return { error: badHost, limit: null };
  const path = (req.url ?? '').split('?')[0] ?? '';
  // Only the public API is keyed; other paths go on as usual.
  if (!/^\/(alt\/)?v\d+\//.test(path)) return null;
  // In the order the routes answer once the body comes (the key, a route still to come, the body's media type, its
  // size and encoding), so a body gets the same answer with Expect or without.
  let key: ApiKeyRecord | null = null;
  try {
    key = await auth.authenticate(req.headers.authorization);
  } catch (err) {
    if (isGatewayError(err) && (err.code === 'unauthorized' || err.code === 'store_unavailable')) return { error: err, limit: null };
  }
  const method = req.method ?? '';
  const media = bodyMediaOf(method, path);
  const tooLarge = tooLargeDeclared(req, path, config);
  const refused = pendingRouteError(method, path) ?? (media === undefined ? tooLarge : bodyRefusal(media, req.headers, tooLarge));
  if (key === null) return refused && { error: refused, limit: null };
  if (refused === null) {
    // An upload of a key whose window is full is refused before it is read, as without Expect (rate-limit.ts,
    // refuseUploadsOverLimit): the client is not told to send tens of MB only to get the 429. Not counted, as there.
    if (!isTranscription(path) || !isMultipart(req.headers['content-type'])) return null;
    const peeked = await Promise.resolve(limiter.peek(key.id, key.rateLimitRpm)).catch(() => null);
    return peeked && !peeked.allowed ? rateLimited(peeked) : null;
  }
  // Counted against the key's rate limit, as the same refusal is without Expect (SPEC, Limits); the limiter's refusal wins.
  const decision = await Promise.resolve(limiter.hit(key.id, key.rateLimitRpm, requestId)).catch(() => null);
  if (decision && !decision.allowed) return rateLimited(decision);
  return { error: refused, limit: decision };
}

function rateLimited(decision: LimitDecision): Refusal {
  return { error: rateLimitedError(decision), limit: decision };
}

function isTranscription(path: string): boolean {
  return /\/audio\/transcriptions$/.test(path);
}

function tooLargeDeclared(req: IncomingMessage, path: string, config: GatewayConfig): GatewayError | null {
  const length = Number(req.headers['content-length']);
  if (isTranscription(path)) return declaredTooLarge(length, config.uploadLimitBytes) ? tooLarge(config.uploadLimitBytes) : null;
  if (Number.isFinite(length) && length > config.bodyLimitBytes) {
    return bodyTooLarge(config.bodyLimitBytes);
  }
  return null;
}

/** The 417, answered here: Node asks for it before there is a request for the routes to take. */
function refuse417(req: IncomingMessage, res: ServerResponse, refused: GatewayError, startedAt: number, observe: RawAnswers): void {
  const variant = variantOfUrl(req.url ?? '');
  const { body } = errorEnvelope(refused, variant);
  const requestId = newRequestId();
  // The body was never asked for: the connection cannot be reused. A client may send it anyway (RFC 9110 10.1.1), so what
  // it sends is read and dropped after the answer: closed at once, the connection is reset under the client's writes.
  lingerOnClose(req);
  res.writeHead(417, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(body),
    [H.requestId]: requestId,
    [H.serverTiming]: serverTiming(performance.now() - startedAt, 0),
    connection: 'close',
  });
  res.end(body);
  observe.answered({ requestId, status: 417, variant, startedAt, method: req.method, url: req.url });
}

/** The refusal's error, carrying the limiter's headers when it met the limiter (as plugins/rate-limit.ts sets them on every counted answer). */
function withLimitHeaders({ error, limit }: Refusal): GatewayError {
  if (limit === null) return error;
  return new GatewayError(error.code, error.message, {
    param: error.param,
    ...(error.retryAfterS === undefined ? {} : { retryAfterS: error.retryAfterS }),
    ...(error.retryAfterMs === undefined ? {} : { retryAfterMs: error.retryAfterMs }),
    headers: { ...error.headers, ...rateLimitHeaders(limit) },
  });
}
