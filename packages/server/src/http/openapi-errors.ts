import { type CanonicalCode, errorEnvelopeSchema, type Variant, wireError } from '@gw/schema';
import { int, limitHeaders, replayedHeader, requestIdHeader, text } from './openapi-headers.js';
import { pendingRouteError } from './routes/not-implemented.js';

/**
 * The error statuses of each operation in the OpenAPI document, each with its variant's envelope whose `code`
 * is narrowed to the codes that status carries there, so that a generated client types every answer. The
 * route schemas keep their 4XX/5XX ranges (what Fastify serialises with): the document is changed after.
 */

interface Response {
  description?: string;
  headers?: Record<string, unknown>;
  content?: Record<string, { schema: unknown }>;
}
interface Operation {
  responses?: Record<string, Response | undefined>;
}
interface Document {
  paths?: Record<string, Record<string, Operation | undefined> | undefined>;
}

/** When each canonical error is given, in a line (docs/errors.md has the full conditions). */
const WHEN: Record<CanonicalCode, string> = {
  validation: 'the body, a query parameter, a routing header or the path does not match the schema; the message names the field',
  unauthorized: 'the key (on the admin API, the admin token) is missing, malformed, revoked or unknown, or more than one Authorization header is sent',
  budget_exceeded:
    "the key's or workspace's budget is used up (x-should-retry: false), or what is left is held by requests in flight (Retry-After: 1, or until the holds of an instance that died are let go; x-should-retry: true)",
  model_not_found: "the model does not exist, or is not enabled for the key's workspace",
  model_deprecated: 'the model is retired upstream',
  provider_unsupported: 'X-Gateway-Provider names a provider that does not host the model, or an unknown one',
  not_found: 'no such resource',
  method_not_allowed: 'the path has routes for other methods only (Allow lists them)',
  stream_not_found: "Last-Event-ID names a stream that is unknown, expired or another key's, or the stream an X-Idempotency-Key replays is gone",
  conflict: 'a request with the same X-Idempotency-Key is still running (Retry-After: 1)',
  key_revoked: 'the key is revoked: its rate limit and budget can no longer be changed',
  request_timeout: 'the body was not received within GW_REQUEST_TIMEOUT_MS; the connection is closed',
  payload_too_large: 'the body is larger than the gateway accepts',
  unsupported_media_type: 'the body is not in the media type the route takes, is JSON in a charset other than UTF-8, or is sent compressed',
  unprocessable: 'the X-Idempotency-Key was used with another request, or its answer was billed but not kept (GW_IDEMPOTENCY_KEPT_MB)',
  headers_too_large: 'the request headers are larger than 16 KB',
  rate_limited: "the key's requests per minute (in B's embeddings, the workspace's beta allowance) are used up; Retry-After says when to retry",
  internal: 'a fault in the gateway itself, logged with the request id',
  not_implemented: 'the capability has not shipped yet (x-should-retry: false)',
  upstream_failed: 'every provider tried failed (with Retry-After when the last one named its wait, or a skipped one is back at a known time)',
  no_healthy_provider: 'no provider of the model (or the pinned one) is available to begin with, every circuit open; Retry-After says when one is tried again',
  store_unavailable: 'the store is unreachable and the key (or its workspace, or its budget) cannot be checked; Retry-After: 1',
  idempotency_unavailable: 'X-Idempotency-Key was sent and its storage cannot be reached; Retry-After: 1',
  shutting_down: 'the instance is draining after SIGTERM; Retry-After: 1 (another instance answers the retry)',
  out_of_resources:
    'the instance holds as many request bodies as GW_BODY_MEMORY_MB lets it, has no disk left to spool an upload, or could not open a connection to the provider, out of file descriptors or local ports; Retry-After: 1',
  upstream_timeout: 'the provider did not connect or answer in time (Retry-After: when the first offer is back, where every one is then out)',
  stream_buffer_exceeded: 'only as the last event of a stream already answered 200',
};

/** What any keyed request can meet: its key refused or not checkable, the instance draining, a fault. */
const KEYED: CanonicalCode[] = ['unauthorized', 'store_unavailable', 'shutting_down', 'internal'];
/** A request routed to a provider: a body, a model, the limits, the idempotency key, the upstream. */
const ROUTED: CanonicalCode[] = [
  ...KEYED,
  'validation',
  'provider_unsupported',
  'budget_exceeded',
  'model_not_found',
  'model_deprecated',
  'conflict',
  'request_timeout',
  'payload_too_large',
  'unsupported_media_type',
  'unprocessable',
  'rate_limited',
  'upstream_failed',
  'no_healthy_provider',
  'idempotency_unavailable',
  'out_of_resources',
  'upstream_timeout',
];
/** The admin API: its token, its store, a bad body or path, an unknown id. */
const ADMIN: CanonicalCode[] = ['unauthorized', 'store_unavailable', 'shutting_down', 'internal', 'validation'];

/** The canonical errors `method path` can answer with. */
function errorsOf(method: string, path: string): CanonicalCode[] {
  const withBody = method === 'post' || method === 'patch';
  if (path.startsWith('/admin/')) {
    return [
      ...ADMIN,
      ...(path.includes('{id}') ? (['not_found'] as const) : []),
      ...(method === 'patch' && path === '/admin/v1/keys/{id}' ? (['key_revoked'] as const) : []),
      ...(withBody ? (['payload_too_large', 'unsupported_media_type', 'request_timeout', 'out_of_resources'] as const) : []),
    ];
  }
  // A route still to come answers 501 once the key is checked and counted, before anything else is read (a key over
  // its limit gets the 429 instead); a bad escape in its id is a 400.
  if (pendingRouteError(method.toUpperCase(), path.replaceAll(/\{[^}]+\}/g, 'x'))) {
    return [...KEYED, 'not_implemented', 'rate_limited', ...(path.includes('{') ? (['validation'] as const) : [])];
  }
  if (/\/models$/.test(path)) return [...KEYED, 'validation'];
  if (/\/models\//.test(path)) return [...KEYED, 'validation', 'model_not_found', 'model_deprecated'];
  if (path.endsWith('/chat/completions')) return [...ROUTED, 'stream_not_found'];
  return ROUTED;
}

/**
 * The codes whose answer says when to retry: `true` always, `false` only at times (a budget held by requests in flight;
 * every provider failed and the last one named its wait, or the first skipped one is back at a known time).
 */
const WAITS = new Map<CanonicalCode, boolean>([
  ['conflict', true],
  ['rate_limited', true],
  ['no_healthy_provider', true],
  ['store_unavailable', true],
  ['idempotency_unavailable', true],
  ['shutting_down', true],
  ['out_of_resources', true],
  ['budget_exceeded', false],
  ['upstream_failed', false],
  ['upstream_timeout', false],
]);

/** Statuses at which the limiter has always run (the request named a model the key may use, or a route still to come's 501): its headers are sent. */
const AFTER_LIMITER = new Set([402, 409, 422, 429, 501, 502, 504]);

/** The headers an error of `status` carries; `required` where every such answer has them. */
function headersOf(status: number, codes: CanonicalCode[], limited: boolean, beta: boolean, routed: boolean): Record<string, unknown> {
  const headers: Record<string, unknown> = { 'X-Request-Id': requestIdHeader() };
  // A provider's refusal is the one error an X-Idempotency-Key keeps and gives again (a routed request's 400).
  if (status === 400 && routed) headers['Idempotent-Replayed'] = replayedHeader();
  // Retry-After where a code of the status may carry it; required where each one does. A 409 waits out the request
  // that holds its idempotency key, the admin API's (a revoked key) has nothing to wait for.
  if (codes.some((c) => WAITS.has(c))) {
    const always = codes.every((c) => WAITS.get(c) === true);
    headers['Retry-After'] = int('Seconds to wait before retrying.', always);
    headers['retry-after-ms'] = int('The same wait in milliseconds, exact where the gateway knows it (Retry-After is rounded up to whole seconds).', always);
  }
  if (status === 402 || status === 501) {
    headers['x-should-retry'] = {
      description: 'Whether a retry can succeed: false for a budget used up and for 501; true for a 402 that only requests in flight cause.',
      required: true,
      schema: { type: 'string', enum: ['true', 'false'] },
    };
  }
  // The embeddings beta's 429 carries none of the key's count (only X-RateLimit-Enforced): its own window refused it.
  return limited ? { ...headers, ...limitHeaders(AFTER_LIMITER.has(status), AFTER_LIMITER.has(status) && !(beta && status === 429)) } : headers;
}

/** One documented status: the envelope with `code` narrowed to what the status carries, and when each is given. */
function statusResponse(variant: Variant, status: number, codes: CanonicalCode[], limited: boolean, beta: boolean, routed: boolean): Response {
  const byWire = new Map<string, string[]>();
  for (const code of codes) {
    const { code: wire } = wireError(code, variant);
    byWire.set(wire, [...(byWire.get(wire) ?? []), WHEN[code]]);
  }
  const envelope = structuredClone(errorEnvelopeSchema(variant)) as {
    title?: string;
    properties: { error: { properties: Record<string, unknown> } };
  };
  envelope.title = `Error${variant.toUpperCase()}${status}`;
  envelope.properties.error.properties['code'] = { type: 'string', enum: [...byWire.keys()] };
  const lines = [...byWire].map(([wire, when]) => `\`${wire}\`: ${when.join('; or ')}.`);
  return {
    description: lines.join(' '),
    headers: headersOf(status, codes, limited, beta, routed),
    content: { 'application/json': { schema: envelope } },
  };
}

/** Adds each operation's error statuses (public API in its variant, admin API in A's envelope), before its 4XX/5XX fallbacks. */
export function documentErrors(doc: Document): Document {
  for (const [path, item] of Object.entries(doc.paths ?? {})) {
    const variant: Variant | null = /^\/alt\/v[12]\//.test(path) ? 'b' : /^\/(v[12]|admin)\//.test(path) ? 'a' : null;
    if (!variant || !item) continue;
    for (const [method, op] of Object.entries(item)) {
      if (!op?.responses) continue;
      const codes = errorsOf(method, path);
      // Counted against the key's limit: the public API but its model list (docs/decisions.md, What counts against a key's rate limit).
      const limited = !path.startsWith('/admin/') && !/\/models(\/|$)/.test(path);
      // Variant B's embeddings are a beta with a window of its own, which answers 429 too.
      const beta = variant === 'b' && path.endsWith('/embeddings');
      // Sent to a provider: its answer is what an X-Idempotency-Key keeps.
      const routed = codes.includes('upstream_failed');
      const byStatus = new Map<number, CanonicalCode[]>();
      for (const code of codes) {
        const { status } = wireError(code, variant);
        byStatus.set(status, [...(byStatus.get(status) ?? []), code]);
      }
      const { '4XX': clientRange, '5XX': serverRange, ...answers } = op.responses;
      for (const range of [clientRange, serverRange]) {
        if (!range) continue;
        if (path.startsWith('/admin/')) {
          range.description = `${range === clientRange ? 'A refused request' : 'A failure'}, in variant A's error envelope.`;
          range.headers = { ...(range.headers ?? {}), 'X-Request-Id': requestIdHeader() };
        }
        range.description = `${range.description ?? ''}${FALLBACK_NOTE}`;
        // The 405 the note names is the one answer of the ranges with a header of its own.
        if (range === clientRange) range.headers = { ...(range.headers ?? {}), Allow: text('With 405: the methods the path has, as `GET, HEAD`.') };
      }
      const statuses = [...byStatus].sort(([a], [b]) => a - b);
      op.responses = {
        ...answers,
        ...Object.fromEntries(statuses.map(([status, list]) => [String(status), statusResponse(variant, status, list, limited, beta, routed)])),
        ...(clientRange ? { '4XX': clientRange } : {}),
        ...(serverRange ? { '5XX': serverRange } : {}),
      };
      // The admin API's successes carry the request id too (the public API's get theirs in openapi-headers.ts).
      if (path.startsWith('/admin/')) {
        for (const [status, answer] of Object.entries(op.responses)) {
          if (answer && status.startsWith('2')) answer.headers = { ...(answer.headers ?? {}), 'X-Request-Id': requestIdHeader() };
        }
        const ok = op.responses['200'];
        if (ok && CHANGES.has(`${method} ${path}`)) ok.headers = { ...ok.headers, 'X-Gateway-Propagation': PROPAGATION };
      }
    }
  }
  return doc;
}

/** The admin changes told to every instance (docs/decisions.md, API keys). */
const CHANGES = new Set(['patch /admin/v1/keys/{id}', 'post /admin/v1/keys/{id}/revoke', 'patch /admin/v1/workspaces/{id}']);
const PROPAGATION = {
  description:
    '`confirmed`: every instance applied the change before this answer. `unconfirmed`: some instance was not seen to ' +
    '(Redis slow, unreachable, or an instance stalled); it applies the change as the message reaches it, or from the store (docs/decisions.md).',
  required: true,
  schema: { type: 'string', enum: ['confirmed', 'unconfirmed'] },
};

/** What the 4XX/5XX ranges stand for once each status is listed. */
const FALLBACK_NOTE =
  ' Any status not listed above: 405 for another method (Allow lists the methods), 417 for an Expect other than 100-continue, ' +
  "and 431 for headers over 16 KB (in variant A's envelope, the connection closed).";
