import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { H, wireError } from '@gw/schema';
import type { ApiKeyAuthenticator } from '../auth/api-keys.js';
import type { GatewayConfig } from '../config/index.js';
import { isGatewayError } from '../errors/gateway-error.js';
import { newRequestId } from '../lib/ids.js';
import { variantOfUrl } from './framework-errors.js';

/**
 * `Expect: 100-continue` (curl sends it for any body over 1 MB, such as an audio upload): the key and
 * the declared size are checked before the client is told to send its body, so a wrong key or a file
 * over the limit is refused without the upload. Node would otherwise answer 100 at once.
 */
export function checkBeforeContinue(server: Server, auth: ApiKeyAuthenticator, config: GatewayConfig): void {
  server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
    refusal(req, auth, config).then((refused) => {
      if (refused) return refuse(req, res, refused);
      res.writeContinue();
      server.emit('request', req, res);
    });
  });
}

type Refusal = { code: 'unauthorized' | 'payload_too_large' | 'store_unavailable'; message: string };

async function refusal(req: IncomingMessage, auth: ApiKeyAuthenticator, config: GatewayConfig): Promise<Refusal | null> {
  const path = (req.url ?? '').split('?')[0] ?? '';
  // Only the public API is keyed; other paths go on as usual.
  if (!/^\/(alt\/)?v\d+\//.test(path)) return null;
  const limit = /\/audio\/transcriptions$/.test(path) ? config.uploadLimitBytes : config.bodyLimitBytes;
  const length = Number(req.headers['content-length']);
  if (Number.isFinite(length) && length > limit) {
    return { code: 'payload_too_large', message: `The request body is larger than this gateway accepts (${limit} bytes).` };
  }
  try {
    await auth.authenticate(req.headers.authorization);
    return null;
  } catch (err) {
    if (isGatewayError(err) && (err.code === 'unauthorized' || err.code === 'store_unavailable')) return { code: err.code, message: err.message };
    return null;
  }
}

function refuse(req: IncomingMessage, res: ServerResponse, refused: Refusal): void {
  const { status, code, type } = wireError(refused.code, variantOfUrl(req.url ?? ''));
  const body = JSON.stringify({ error: { message: refused.message, type, code, param: null } });
  // The body was never asked for: the connection cannot be reused.
  res.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(body),
    [H.requestId]: newRequestId(),
    ...(refused.code === 'store_unavailable' ? { [H.retryAfter]: '1' } : {}),
    connection: 'close',
  });
  res.end(body);
}
