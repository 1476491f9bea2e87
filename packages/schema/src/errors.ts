/**
 * The closed catalogue of canonical errors. Code below `http/` throws these
 * canonical codes; each variant renders them with its own status and code.
 * Codes are never reused: a new condition gets a new row (docs/errors.md).
 */
export const CANONICAL_ERRORS = {
  validation: { a: [400, 'validation_error'], b: [400, 'invalid_request'] },
  unauthorized: { a: [401, 'unauthorized'], b: [401, 'invalid_api_key'] },
  budget_exceeded: { a: [402, 'budget_exceeded'], b: [402, 'quota_exceeded'] },
  model_not_found: { a: [404, 'model_not_found'], b: [400, 'model_not_found'] },
  model_deprecated: { a: [410, 'model_deprecated'], b: [400, 'model_not_found'] },
  provider_unsupported: { a: [400, 'validation_error'], b: [400, 'provider_unsupported'] },
  not_found: { a: [404, 'not_found'], b: [404, 'not_found'] },
  method_not_allowed: { a: [405, 'method_not_allowed'], b: [405, 'method_not_allowed'] },
  stream_not_found: { a: [404, 'stream_not_found'], b: [404, 'stream_not_found'] },
  conflict: { a: [409, 'conflict'], b: [409, 'conflict'] },
  key_revoked: { a: [409, 'key_revoked'], b: [409, 'key_revoked'] },
  request_timeout: { a: [408, 'request_timeout'], b: [408, 'request_timeout'] },
  payload_too_large: { a: [413, 'payload_too_large'], b: [413, 'payload_too_large'] },
  unsupported_media_type: { a: [415, 'unsupported_media_type'], b: [415, 'unsupported_media_type'] },
  unprocessable: { a: [422, 'unprocessable_entity'], b: [422, 'unprocessable_entity'] },
  headers_too_large: { a: [431, 'headers_too_large'], b: [431, 'headers_too_large'] },
  rate_limited: { a: [429, 'rate_limit_exceeded'], b: [429, 'rate_limited'] },
  internal: { a: [500, 'internal_error'], b: [500, 'internal_error'] },
  not_implemented: { a: [501, 'not_implemented'], b: [501, 'not_implemented'] },
  upstream_failed: { a: [502, 'provider_down'], b: [502, 'upstream_unavailable'] },
  no_healthy_provider: { a: [503, 'provider_down'], b: [502, 'upstream_unavailable'] },
  store_unavailable: { a: [503, 'service_unavailable'], b: [503, 'service_unavailable'] },
  idempotency_unavailable: { a: [503, 'service_unavailable'], b: [503, 'service_unavailable'] },
  shutting_down: { a: [503, 'service_unavailable'], b: [503, 'service_unavailable'] },
  out_of_resources: { a: [503, 'service_unavailable'], b: [503, 'service_unavailable'] },
  upstream_timeout: { a: [504, 'upstream_timeout'], b: [504, 'upstream_timeout'] },
  stream_buffer_exceeded: { a: [503, 'stream_buffer_exceeded'], b: [503, 'stream_buffer_exceeded'] },
} as const satisfies Record<string, { a: readonly [number, string]; b: readonly [number, string] }>;

export type CanonicalCode = keyof typeof CANONICAL_ERRORS;
export type Variant = 'a' | 'b';
export type WireErrorCode = (typeof CANONICAL_ERRORS)[CanonicalCode][Variant][1];

/** The error envelope both variants answer with (OpenAI's shape). */
export interface ErrorEnvelope {
  error: { message: string; type: string; code: string; param: string | null };
}

/** Variant B's `type` field groups codes by class, as OpenAI does. */
const B_TYPES: Record<CanonicalCode, string> = {
  validation: 'invalid_request_error',
  unauthorized: 'authentication_error',
  budget_exceeded: 'quota_error',
  model_not_found: 'invalid_request_error',
  model_deprecated: 'invalid_request_error',
  provider_unsupported: 'invalid_request_error',
  not_found: 'invalid_request_error',
  method_not_allowed: 'invalid_request_error',
  stream_not_found: 'invalid_request_error',
  conflict: 'invalid_request_error',
  key_revoked: 'invalid_request_error',
  request_timeout: 'invalid_request_error',
  payload_too_large: 'invalid_request_error',
  unsupported_media_type: 'invalid_request_error',
  unprocessable: 'invalid_request_error',
  headers_too_large: 'invalid_request_error',
  rate_limited: 'rate_limit_error',
  internal: 'server_error',
  not_implemented: 'server_error',
  upstream_failed: 'upstream_error',
  no_healthy_provider: 'upstream_error',
  store_unavailable: 'server_error',
  idempotency_unavailable: 'server_error',
  shutting_down: 'server_error',
  out_of_resources: 'server_error',
  upstream_timeout: 'upstream_error',
  stream_buffer_exceeded: 'server_error',
};

export function wireError(code: CanonicalCode, variant: Variant): { status: number; code: string; type: string } {
  const [status, wire] = CANONICAL_ERRORS[code][variant];
  // Variant A uses the code as the type (SPEC: 429 has type and code `rate_limit_exceeded`).
  return { status, code: wire, type: variant === 'a' ? wire : B_TYPES[code] };
}

/** An error's status and body (the envelope, as JSON) in a variant; `message` as the client may read it. */
export function errorJson(code: CanonicalCode, variant: Variant, message: string, param: string | null = null): { status: number; body: string } {
  const { status, code: wire, type } = wireError(code, variant);
  const envelope: ErrorEnvelope = { error: { message, type, code: wire, param } };
  return { status, body: JSON.stringify(envelope) };
}
