import type { UpstreamError } from '../../errors/upstream-error.js';
import { upstreamHttpError } from '../error-status.js';
import { boundedMessage, type JsonResponse, upstreamErrorMessage } from '../http-client.js';

interface Issue {
  loc?: unknown;
  msg?: unknown;
}

/**
 * Mistral's several error shapes: `{object:'error', message, type, code}`
 * where `message` may be a string or `{detail:[…]}`, FastAPI's bare
 * `{detail}`, and `{message, request_id}`. An unknown model (type
 * `invalid_model`, code 1500) comes as 400 but is the provider's gap, not
 * the client's: it is mapped to 404 so routing tries the next offer.
 */
export function mistralError(provider: string, res: JsonResponse): UpstreamError {
  const body = (res.body && typeof res.body === 'object' ? res.body : {}) as Record<string, unknown>;
  const unknownModel = body['type'] === 'invalid_model' || String(body['code']) === '1500';
  return upstreamHttpError(provider, res, unknownModel ? 404 : res.status, mistralMessage(res.body));
}

/** A readable message: validation issues as `body.field: msg`, joined. */
export function mistralMessage(body: unknown): string {
  const b = (body && typeof body === 'object' ? body : {}) as Record<string, unknown>;
  const nested = b['message'] && typeof b['message'] === 'object' ? (b['message'] as Record<string, unknown>)['detail'] : undefined;
  const detail = Array.isArray(nested) ? nested : Array.isArray(b['detail']) ? b['detail'] : null;
  if (detail) {
    return boundedMessage(
      detail
        .map((d) => {
          const issue = (d ?? {}) as Issue;
          const loc = Array.isArray(issue.loc) ? issue.loc.join('.') : 'body';
          return `${loc}: ${typeof issue.msg === 'string' ? issue.msg : 'invalid'}`;
        })
        .join('; '),
    );
  }
  return upstreamErrorMessage(body);
}
