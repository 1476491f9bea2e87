import type { UpstreamError } from '../../errors/upstream-error.js';
import { upstreamHttpError } from '../error-status.js';
import { type JsonResponse, upstreamErrorMessage } from '../http-client.js';

/**
 * Turns a non-2xx OpenAI-style answer into an UpstreamError (status,
 * message, Retry-After). Scaleway answers an unknown model with 422 (type
 * `not_found_error`, "Model not found"): that is the provider's gap, not
 * the client's, so it is mapped to 404 and routing tries the next offer.
 * Statuses routing does not know (402, 405, …) become 502, as for the
 * other adapters. Cohere's compatibility API answers a deny-listed key
 * with 498: our key refused, 401.
 */
export function httpError(provider: string, res: JsonResponse): UpstreamError {
  const message = upstreamErrorMessage(res.body);
  const status = res.status === 422 && isUnknownModel(res.body, message) ? 404 : res.status === 498 ? 401 : res.status;
  return upstreamHttpError(provider, res, status, message);
}

function isUnknownModel(body: unknown, message: string): boolean {
  const b = (body && typeof body === 'object' ? body : {}) as { error?: { type?: unknown }; type?: unknown };
  const type = (b.error && typeof b.error === 'object' ? b.error.type : undefined) ?? b.type;
  return type === 'not_found_error' || /model (not found|.*does not exist)/i.test(message);
}
