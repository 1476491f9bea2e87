import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { H } from '@gw/schema';
import type { ApiKeyAuthenticator } from '../auth/api-keys.js';
import type { GatewayConfig } from '../config/index.js';
import { GatewayError, isGatewayError } from '../errors/gateway-error.js';
import { newRequestId } from '../lib/ids.js';
import type { LimitDecision, RateLimiter } from '../limits/types.js';
import type { ApiKeyRecord } from '../store/types.js';
import { errorEnvelope } from './errors.js';
import { variantOfUrl } from './framework-errors.js';
import { lingerOnClose } from './lingering-close.js';
import { declaredTooLarge, tooLarge } from './multipart-spool.js';
import { pendingRouteError } from './routes/not-implemented.js';
import { serverTiming } from './server-timing.js';

/**
 * `Expect: 100-continue` (curl sends it for any body over 1 MB, such as an audio upload): the key, the
 * declared size and, for an upload, the key's rate-limit window are checked before the client is told to
 * send its body, so a wrong key, a file over the limit or an upload of a key over its limit is refused
 * without the upload. Node would otherwise answer 100 at once.
 */

/** A refusal, with the limiter's decision when the request met the limiter (its X-RateLimit-* headers go with it). */
interface Refusal {
  error: GatewayError;
  limit: LimitDecision | null;
}
export function checkBeforeContinue(server: Server, auth: ApiKeyAuthenticator, limiter: RateLimiter, config: GatewayConfig): void {
  // An expectation other than 100-continue cannot be met (RFC 9110: 417), answered in the envelope rather than Node's bare 417.
  server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => {
    const refused = new GatewayError('validation', `The Expect header '${String(req.headers.expect).slice(0, 80)}' cannot be met: only 100-continue is.`);
    refuse(req, res, { error: refused, limit: null }, performance.now(), newRequestId(), 417);
  });
  server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
    const startedAt = performance.now();
    const requestId = newRequestId();
    void refusal(req, auth, limiter, config, requestId).then((refused) => {
      if (refused) return refuse(req, res, refused, startedAt, requestId);
      res.writeContinue();
      server.emit('request', req, res);
    });
  });
}

/** A refusal, with the limiter's decision when the request was counted (its headers go on the answer). */
interface Refusal {
  error: GatewayError;
  limit: LimitDecision | null;
}

async function refusal(
  req: IncomingMessage,
  auth: ApiKeyAuthenticator,
  limiter: RateLimiter,
  config: GatewayConfig,
  requestId: string,
): Promise<Refusal | null> {
  const path = (req.url ?? '').split('?')[0] ?? '';
  // Only the public API is keyed; other paths go on as usual.
  if (!/^\/(alt\/)?v\d+\//.test(path)) return null;
  // In the order the routes answer once the body comes (the key, a route still to come, the size), so a body
  // gets the same answer with Expect or without.
  let key: ApiKeyRecord | null = null;
  try {
    key = await auth.authenticate(req.headers.authorization);
  } catch (err) {
    if (isGatewayError(err) && (err.code === 'unauthorized' || err.code === 'store_unavailable')) return { error: err, limit: null };
  }
  const refused = pendingRouteError(req.method ?? '', path) ?? tooLargeDeclared(req, path, config);
  if (key === null) return refused && { error: refused, limit: null };
  if (refused === null) {
    // An upload of a key whose window is full is refused before it is read, as without Expect (rate-limit.ts,
    // refuseUploadsOverLimit): the client is not told to send tens of MB only to get the 429. Not counted, as there.
    if (!isUpload(req, path)) return null;
    const peeked = await Promise.resolve(limiter.peek(key.id, key.rateLimitRpm)).catch(() => null);
    return peeked && !peeked.allowed ? rateLimited(peeked) : null;
  }
  // Counted against the key's rate limit, as the same refusal is without Expect (SPEC, Limits); the limiter's refusal wins.
  const decision = await Promise.resolve(limiter.hit(key.id, key.rateLimitRpm, requestId)).catch(() => null);
  if (decision && !decision.allowed) return rateLimited(decision);
  return { error: refused, limit: decision };
}

function rateLimited(decision: LimitDecision): Refusal {
  return { error: new GatewayError('rate_limited', `Rate limit exceeded (${decision.limit} RPM)`, { retryAfterS: decision.resetS }), limit: decision };
}

function isUpload(req: IncomingMessage, path: string): boolean {
  const type = req.headers['content-type'];
  return /\/audio\/transcriptions$/.test(path) && typeof type === 'string' && type.toLowerCase().startsWith('multipart/');
}

function tooLargeDeclared(req: IncomingMessage, path: string, config: GatewayConfig): GatewayError | null {
  const length = Number(req.headers['content-length']);
  if (/\/audio\/transcriptions$/.test(path)) return declaredTooLarge(length, config.uploadLimitBytes) ? tooLarge(config.uploadLimitBytes) : null;
  if (Number.isFinite(length) && length > config.bodyLimitBytes) {
    return new GatewayError('payload_too_large', `The request body is larger than this gateway accepts (${config.bodyLimitBytes} bytes).`);
  }
  return null;
}

function refuse(
  req: IncomingMessage,
  res: ServerResponse,
  { error: refused, limit }: Refusal,
  startedAt: number,
  requestId: string,
  statusOverride?: number,
): void {
  const { status: envelopeStatus, body } = errorEnvelope(refused, variantOfUrl(req.url ?? ''));
  const status = statusOverride ?? envelopeStatus;
  // The body was never asked for: the connection cannot be reused. A client may send it without waiting for 100
  // (RFC 9110 10.1.1), so what it sends is read and dropped after the answer: closed at once, the connection is
  // reset under the client's writes and the answer lost with it.
  lingerOnClose(req);
  res.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(body),
    [H.requestId]: requestId,
    [H.serverTiming]: serverTiming(performance.now() - startedAt, 0),
    ...(refused.code === 'store_unavailable' ? { [H.retryAfter]: '1' } : {}),
    ...(refused.retryAfterS !== undefined ? { [H.retryAfter]: String(refused.retryAfterS) } : {}),
    ...(limit === null ? {} : limitHeaders(limit)),
    connection: 'close',
  });
  res.end(body);
}

/** The limiter's headers, as plugins/rate-limit.ts sets them on every counted answer. */
function limitHeaders(d: LimitDecision): Record<string, string> {
  return {
    [H.rateLimitLimit]: String(d.limit),
    [H.rateLimitRemaining]: String(d.remaining),
    [H.rateLimitReset]: String(d.resetS),
    [H.rateLimitEnforced]: String(d.enforced),
  };
}
