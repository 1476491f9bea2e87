import { UpstreamError } from '../errors/upstream-error.js';
import { redactedHead } from '../lib/redact.js';
import {
  type JsonResponse,
  MAX_PROVIDER_MESSAGE_CHARS,
  MAX_RETRY_AFTER_S,
  notAnEventStream,
  notEventStreamType,
  retryAfterSeconds,
  upstreamErrorMessage,
} from './http-client.js';

/** Statuses routing understands: the client's (400/413/422), the provider's key or model (401/403/404), limits (408/429) and 5xx. */
const ROUTABLE = new Set([400, 401, 403, 404, 408, 413, 422, 429]);

/** Any other status (402 billing, 405, 409, Cohere's 499…) is the provider failing us: 502, worth the next offer. */
export function routableStatus(status: number): number {
  return status >= 500 || ROUTABLE.has(status) ? status : 502;
}

/** The longest provider message passed on to clients; the log gets as much as the gateway reads (MAX_PROVIDER_MESSAGE_CHARS). */
const MAX_RELAYED_CHARS = 300;

/**
 * What a provider says of the gateway's own account there, in place of its words: its credentials (401, 403), its
 * payment (402), its limits (429). Those words are the operator's (the log has them): a 429 names the account's
 * organisation and its limits ("in organization org-… on tokens per min: Limit 30000, Used 29990"), a 402 its balance.
 */
const ACCOUNT_MATTERS: Readonly<Record<number, string>> = {
  401: "it refused the gateway's credentials",
  402: "it refused the gateway's account (payment required)",
  403: "it refused the gateway's credentials",
  429: "it is limiting the gateway's requests",
};

/**
 * What a client is told of a provider's answer: what it says of the gateway's own account ({@link ACCOUNT_MATTERS})
 * is not the client's business; any other message at most MAX_RELAYED_CHARS long.
 */
function clientVisible(status: number, message: string): string {
  const account = ACCOUNT_MATTERS[status];
  if (account !== undefined) return account;
  const html = htmlPageTitle(message);
  if (html !== null) return html === '' ? 'an HTML page' : `an HTML page titled "${html}"`;
  return relayedMessage(message);
}

/** A provider's message as clients are told it: at most MAX_RELAYED_CHARS long. */
function relayedMessage(message: string): string {
  return redactedHead(message, MAX_RELAYED_CHARS);
}

/**
 * An error object a provider sent inside its event stream: clients are told its message as they are a status
 * answer's (at most MAX_RELAYED_CHARS), the log gets more of it. Its status is the one the object names (vLLM's
 * `code: 400` for a prompt over the context window, sent after a 200): a refusal of the request is the client's
 * error, as it is with an error status, and is not tried on the next offer nor counted against this one. Any other
 * error, or one naming no status, is the provider failing: 502.
 */
export function streamErrorEvent(provider: string, message: string, body: unknown): UpstreamError {
  return errorObjectError(`${provider} sent an error in its stream: `, provider, message, body);
}

/**
 * An error object a provider answered with a 200 in place of a completion (a proxy that reports a failure after
 * its status went out, as OpenRouter does): read as one sent in a stream is, its words and the status it names.
 */
export function answeredErrorObject(provider: string, body: unknown): UpstreamError {
  return errorObjectError(`${provider} answered 200 with an error: `, provider, upstreamErrorMessage(body), body);
}

function errorObjectError(said: string, provider: string, message: string, body: unknown): UpstreamError {
  const named = streamErrorStatus(body);
  return new UpstreamError({
    kind: 'http',
    provider,
    status: named === 400 || named === 413 || named === 422 ? named : 502,
    message: `${said}${(named !== undefined && ACCOUNT_MATTERS[named]) || relayedMessage(message)}`,
    detail: `${said}${redactedHead(message, MAX_PROVIDER_MESSAGE_CHARS)}`,
    ...paramOf(body),
  });
}

/**
 * The HTTP status an in-stream error object names: a numeric `code` (vLLM, Scaleway), `status` or `raw_status_code`
 * (Mistral); without one, 400 for the type OpenAI's envelope gives a refused request (Nebius's, Mistral's own).
 */
function streamErrorStatus(body: unknown): number | undefined {
  const inner = errorObject(body) ?? (body !== null && typeof body === 'object' ? (body as Record<string, unknown>) : {});
  for (const name of ['code', 'status', 'raw_status_code']) {
    const v = inner[name];
    const n = typeof v === 'number' ? v : typeof v === 'string' && /^[1-5]\d\d$/.test(v) ? Number(v) : Number.NaN;
    if (n >= 100 && n <= 599) return n;
  }
  return inner['type'] === 'invalid_request_error' || inner['type'] === 'BadRequestError' ? 400 : undefined;
}

/**
 * A proxy's error page in front of a provider (nginx's "502 Bad Gateway"): its title, '' without one, or null
 * for a body that is no HTML page. Clients get the title, not markup that names the proxy and its version.
 */
function htmlPageTitle(message: string): string | null {
  if (!/^\s*<(!doctype html|html|head|body)[\s>]/i.test(message)) return null;
  const title = /<title[^>]*>([^<]*)<\/title>/i.exec(message)?.[1]?.trim() ?? '';
  return title.slice(0, 100);
}

/** An UpstreamError for a non-2xx answer, with the provider's Retry-After (or a fallback the adapter read elsewhere). */
export function upstreamHttpError(provider: string, res: JsonResponse, status: number, message: string, retryAfterS?: number): UpstreamError {
  // An adapter's own reading (Azure's `x-ratelimit-reset-tokens: 99999h`, "retry after N seconds") is bounded as
  // Retry-After is: an absurd or infinite wait is no advice a client should follow.
  const fallback = retryAfterS === undefined || Number.isNaN(retryAfterS) ? undefined : Math.min(MAX_RETRY_AFTER_S, Math.max(0, retryAfterS));
  const retry = retryAfterSeconds(res.headers) ?? fallback;
  const success = res.status >= 200 && res.status < 300;
  // A success read as an error is a stream request's JSON answer (docs/streaming.md): said so, not "answered 200".
  const said = success ? notAnEventStream(provider, notEventStreamType('application/json')) : `${provider} answered ${res.status}`;
  const whole = success && isCompletion(res.body);
  return new UpstreamError({
    kind: 'http',
    provider,
    status: routableStatus(status),
    message: `${said}: ${whole ? 'a whole chat completion' : clientVisible(status, message)}`,
    detail: `${said}: ${whole ? 'a whole chat completion' : redactedHead(message, MAX_PROVIDER_MESSAGE_CHARS)}`,
    ...(retry === undefined ? {} : { retryAfterS: retry }),
    ...paramOf(res.body),
  });
}

/** The longest `param` passed on: a field's path; anything longer is no field name. */
const MAX_PARAM_CHARS = 200;

/**
 * The client's field a refusal names in OpenAI's envelope (`error.param`: Azure's `messages[1].tool_calls[0].type`,
 * vLLM's, Scaleway's): passed on as the client's error's `param`, as OpenAI's own refusal would carry it.
 */
function paramOf(body: unknown): { param?: string } {
  const param = errorObject(body)?.['param'];
  return typeof param === 'string' && param !== '' && param.length <= MAX_PARAM_CHARS ? { param } : {};
}

/** OpenAI's error envelope's inner object (`{"error": {...}}`), or null where the body has none. */
function errorObject(body: unknown): Record<string, unknown> | null {
  const error = body !== null && typeof body === 'object' ? (body as { error?: unknown }).error : undefined;
  return error !== null && typeof error === 'object' ? (error as Record<string, unknown>) : null;
}

/** A whole (non-streamed) completion: its choices and no error; its text would say nothing to a client as a message. */
function isCompletion(body: unknown): boolean {
  const b = body as { choices?: unknown; error?: unknown } | null;
  return b !== null && typeof b === 'object' && Array.isArray(b.choices) && b.error == null;
}
