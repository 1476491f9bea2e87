import type { UpstreamError } from '../../errors/upstream-error.js';
import { upstreamHttpError } from '../error-status.js';
import { boundedMessage, type JsonResponse, upstreamErrorMessage } from '../http-client.js';

/**
 * Azure's `{error:{code, message, innererror}}` (with `code` a string, and
 * `type` often null): `DeploymentNotFound` is the provider lacking the
 * model (404, next offer); `content_filter` is the client's prompt refused
 * by Azure's policy (400, no failover). A 429 may come without
 * `retry-after` but with `x-ratelimit-reset-tokens: 6m0s`, or only with
 * "retry after N seconds" in its message.
 */
export function azureError(provider: string, res: JsonResponse): UpstreamError {
  const raw = (res.body as { error?: unknown } | null)?.error;
  const error = (raw && typeof raw === 'object' ? raw : {}) as { code?: unknown; message?: unknown; innererror?: { code?: unknown } };
  const code = typeof error.code === 'string' ? error.code : '';
  // Not every answer is Azure's envelope (an API Management or proxy error, `{error: "…"}`, `{message}`): its text is still the message.
  let message = typeof error.message === 'string' ? boundedMessage(error.message) : upstreamErrorMessage(res.body);
  let status = res.status;
  if (code === 'DeploymentNotFound') status = 404;
  if (code === 'content_filter') {
    status = 400;
    const inner = typeof error.innererror?.code === 'string' ? error.innererror.code : 'ResponsibleAIPolicyViolation';
    message = `Azure's content filter refused the prompt (${inner}): ${message}`;
  }
  return upstreamHttpError(provider, res, status, message, status === 429 ? resetSeconds(res, message) : undefined);
}

function resetSeconds(res: JsonResponse, message: string): number | undefined {
  for (const name of ['x-ratelimit-reset-requests', 'x-ratelimit-reset-tokens', 'x-rate-limit-reset-requests', 'x-rate-limit-reset-tokens']) {
    const raw = res.headers[name];
    const s = goDurationSeconds(Array.isArray(raw) ? raw[0] : raw);
    if (s !== undefined) return s;
  }
  const m = /retry after (\d+) seconds?/i.exec(message);
  return m ? Number(m[1]) : undefined;
}

/** `6m0s`, `1s`, `250ms`, `1.5s` → whole seconds, rounded up. */
export function goDurationSeconds(value: string | undefined): number | undefined {
  if (!value || !/^(\d+(\.\d+)?(h|m|s|ms))+$/.test(value.trim())) return undefined;
  let total = 0;
  for (const [, n, unit] of value.trim().matchAll(/(\d+(?:\.\d+)?)(ms|h|m|s)/g)) {
    total += Number(n) * (unit === 'h' ? 3600 : unit === 'm' ? 60 : unit === 's' ? 1 : 0.001);
  }
  return Math.ceil(total);
}
