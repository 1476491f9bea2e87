/** Error bodies of the OpenAI-compatible providers (PROVIDERS §5, §6, §8). */
import type { ErrorKind, ErrorSpec, RenderedError } from './types.js';

export type OpenAIFlavor = 'scaleway' | 'ovh' | 'nebius';

const TYPES: Record<ErrorKind, string> = {
  auth_missing: 'authentication_error',
  auth_invalid: 'authentication_error',
  route_not_found: 'not_found_error',
  model_not_found: 'not_found_error',
  bad_request: 'invalid_request_error',
  too_large: 'invalid_request_error',
  rate_limit: 'rate_limit_error',
  server: 'server_error',
  bad_gateway: 'server_error',
  unavailable: 'service_unavailable_error',
  timeout: 'timeout_error',
  other: 'api_error',
};

export function defaultMessage(spec: ErrorSpec): string {
  switch (spec.kind) {
    case 'auth_missing':
      return 'Missing API key: send it in the Authorization header as Bearer token.';
    case 'auth_invalid':
      return 'Invalid API key or insufficient permissions.';
    case 'route_not_found':
      return 'Not Found';
    case 'model_not_found':
      return `The model \`${spec.model ?? ''}\` does not exist.`;
    case 'bad_request':
      return 'Bad request.';
    case 'too_large':
      return 'Request payload too large.';
    case 'rate_limit':
      return 'Too many requests: rate limit exceeded, please retry later.';
    case 'server':
      return 'Internal server error.';
    case 'bad_gateway':
      return 'Bad gateway: the model backend did not answer.';
    case 'unavailable':
      return 'Service temporarily unavailable: the model is overloaded.';
    case 'timeout':
      return 'Gateway timeout.';
    case 'other':
      return `Request failed with status ${spec.status}.`;
  }
}

/** Scaleway: recent envelope with numeric code; 403 for a wrong key, 422 for an unknown model. */
function scaleway(spec: ErrorSpec): RenderedError {
  let status = spec.status;
  if (!spec.fixed && spec.kind === 'auth_invalid') status = 403;
  if (!spec.fixed && spec.kind === 'model_not_found') status = 422;
  const message = spec.message ?? (spec.kind === 'model_not_found' ? `Model not found: ${spec.model ?? ''}` : defaultMessage(spec));
  const type = status === 403 ? 'permission_denied_error' : TYPES[spec.kind];
  const body =
    spec.variant === 1
      ? { object: 'error', message, type, param: spec.param ?? null, code: status }
      : { error: { message, type, param: spec.param ?? null, code: status } };
  return { status, body };
}

/** OVHcloud (vLLM-style body, not documented; our best guess). */
function ovh(spec: ErrorSpec): RenderedError {
  const vllmType: Partial<Record<ErrorKind, string>> = {
    bad_request: 'BadRequestError',
    model_not_found: 'NotFoundError',
    route_not_found: 'NotFoundError',
    auth_missing: 'Unauthorized',
    auth_invalid: 'Unauthorized',
    rate_limit: 'TooManyRequests',
  };
  const message = spec.message ?? (spec.kind === 'auth_invalid' ? 'Invalid or expired token.' : defaultMessage(spec));
  return {
    status: spec.status,
    body: { object: 'error', message, type: vllmType[spec.kind] ?? 'InternalServerError', param: spec.param ?? null, code: spec.status },
  };
}

/** Nebius: FastAPI-style `{detail}` for auth and lookup errors, OpenAI envelope otherwise. */
function nebius(spec: ErrorSpec): RenderedError {
  const message = spec.message ?? defaultMessage(spec);
  if (spec.status === 401 || spec.status === 403 || spec.status === 404) return { status: spec.status, body: { detail: message } };
  const code = spec.kind === 'rate_limit' ? 'rate_limit_exceeded' : spec.kind === 'bad_request' ? 'invalid_request' : null;
  return { status: spec.status, body: { error: { message, type: TYPES[spec.kind], param: spec.param ?? null, code } } };
}

export function renderOpenAIError(flavor: OpenAIFlavor, spec: ErrorSpec): RenderedError {
  switch (flavor) {
    case 'scaleway':
      return scaleway(spec);
    case 'ovh':
      return ovh(spec);
    case 'nebius':
      return nebius(spec);
  }
}
