import { UpstreamError } from '../../errors/upstream-error.js';
import { type JsonResponse, retryAfterSeconds, upstreamErrorMessage } from '../http-client.js';

/** Turns a non-2xx OpenAI-style answer into an UpstreamError (status, message, Retry-After). */
export function httpError(provider: string, res: JsonResponse): UpstreamError {
  const retryAfterS = retryAfterSeconds(res.headers);
  return new UpstreamError({
    kind: 'http',
    provider,
    status: res.status,
    message: `${provider} answered ${res.status}: ${upstreamErrorMessage(res.body)}`,
    ...(retryAfterS === undefined ? {} : { retryAfterS }),
  });
}
