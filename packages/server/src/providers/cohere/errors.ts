import type { UpstreamError } from '../../errors/upstream-error.js';
import { upstreamHttpError } from '../error-status.js';
import { type JsonResponse, upstreamErrorMessage } from '../http-client.js';

/**
 * Cohere's `{id, message}` errors. 498 (a deny-listed token) is our key
 * being refused: 401. 402 (its billing limit) and 499 (cancelled) are the
 * provider failing us: 502, so routing tries the next offer.
 */
export function cohereError(provider: string, res: JsonResponse): UpstreamError {
  const status = res.status === 498 ? 401 : res.status;
  return upstreamHttpError(provider, res, status, upstreamErrorMessage(res.body));
}
