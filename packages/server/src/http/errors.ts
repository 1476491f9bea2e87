import type { IncomingHttpHeaders } from 'node:http';
import { errorJson, H, PATTERN_MEANINGS, type Variant } from '@gw/schema';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { GatewayError, isGatewayError, SEND_AGAIN } from '../errors/gateway-error.js';
import { errorSummary } from '../lib/error-summary.js';
import { redactSecrets } from '../lib/redact.js';
import { BudgetsUnavailableError } from '../limits/budget-types.js';
import { ResumeBufferUnavailableError } from '../streaming/types.js';
import { bodyMediaOf } from './body-media.js';
import { leftBeforeAnswer } from './upstream-call.js';

/**
 * Normalises anything thrown in a request into a GatewayError. `headers`: the request's, read only to word a refusal
 * of its body; `bodyLimit`: the route's, in bytes, said in a 413; `body`: the parsed body, read only to word a refusal of it;
 * `route`: the request's method and route, read only to say which media type its route takes.
 */
export function toGatewayError(
  err: unknown,
  headers?: IncomingHttpHeaders,
  bodyLimit?: number,
  body?: unknown,
  route?: { method: string; routeOptions: { url?: string | undefined } },
): GatewayError {
  if (isGatewayError(err)) return err;
  const e = err as FastifyError;
  if (e.validation && e.validation.length > 0) return validationError(e, body);
  switch (e.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      // Declared too large or counted past the limit as it arrived (chunked): the same words as a refused Expect: 100-continue.
      return bodyTooLarge(bodyLimit);
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE': {
      // A Content-Type Fastify cannot parse (`foo`): refused in the words of the route's own 415, which is not JSON's at every route.
      const media = route && bodyMediaOf(route.method, route.routeOptions.url ?? '');
      return media ? media.unsupported(headers ?? {}) : unsupportedJsonType();
    }
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return emptyBody();
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new GatewayError('validation', 'Content-Length does not match the body.');
  }
  if (e instanceof SyntaxError || e.code === 'FST_ERR_CTP_INVALID_JSON_BODY') {
    // A compressed body is what failed to parse: say so, rather than send the client looking at its JSON.
    const compressed = headers && encodedBodyError(headers);
    if (compressed) return compressed;
    // Fastify's parser gives no detail, and it also refuses valid JSON that names `__proto__` or a
    // `constructor.prototype` (prototype poisoning): the message says both, so that such a body is not taken for a typo.
    if (e.code === 'FST_ERR_CTP_INVALID_JSON_BODY') {
      return new GatewayError(
        'validation',
        "The request body is not valid JSON, or it holds a '__proto__' key or a 'constructor' with a 'prototype' key, which this gateway refuses anywhere in a body.",
      );
    }
    return new GatewayError('validation', `The request body is not valid JSON: ${e.message}`);
  }
  // The client closed the connection while its body was being read (an upload cut off): nobody to answer, nothing wrong here.
  if (e.code === 'ECONNRESET' && e.message === 'aborted') {
    return new GatewayError('validation', 'The request body ended before it was complete: the client closed the connection.');
  }
  // JSON.parse takes any depth; serialising it again (to the provider, or to hash an idempotent body) recurses.
  if (err instanceof RangeError && /call stack/i.test(err.message)) return nestedTooDeeply();
  if (typeof e.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 500) {
    return new GatewayError('validation', e.message);
  }
  return new GatewayError('internal', 'Internal error.', { cause: err });
}

/** A body whose arrays and objects nest deeper than it can be parsed cheaply or serialised again. */
export function nestedTooDeeply(): GatewayError {
  return new GatewayError('validation', 'The request body is nested too deeply to be handled.');
}

/** A body in a media type other than JSON at a JSON route (body-media.ts). */
export function unsupportedJsonType(): GatewayError {
  return new GatewayError('unsupported_media_type', 'Unsupported Content-Type: send application/json.');
}

/** A JSON body over the route's limit, declared (Content-Length, or refused before Expect: 100-continue) or counted as it came. */
export function bodyTooLarge(limit?: number): GatewayError {
  return new GatewayError('payload_too_large', `The request body is larger than this gateway accepts${limit ? ` (${limit} bytes)` : ''}.`);
}

function emptyBody(): GatewayError {
  return new GatewayError('validation', 'The request body is empty; send a JSON object.');
}

/**
 * A body sent encoded, which the gateway does not decode: a `Content-Encoding` other than identity, or a
 * `Transfer-Encoding` coding other than chunked (`gzip, chunked`: Node takes the chunks off and leaves the gzip).
 * Bodies are taken as sent, uncompressed; null for such a body.
 */
export function encodedBodyError(headers: IncomingHttpHeaders): GatewayError | null {
  const content = String(headers['content-encoding'] ?? '').trim();
  if (content !== '' && content.toLowerCase() !== 'identity') {
    return new GatewayError('unsupported_media_type', `Content-Encoding '${content.slice(0, 60)}' is not supported: send the request body uncompressed.`);
  }
  const transfer = headers['transfer-encoding'];
  if (transfer === undefined) return null;
  const codings = transfer
    .toLowerCase()
    .split(',')
    .map((c) => c.trim())
    .filter((c) => c !== '' && c !== 'chunked' && c !== 'identity');
  if (codings.length === 0) return null;
  return new GatewayError(
    'unsupported_media_type',
    `Transfer-Encoding '${codings.join(', ').slice(0, 60)}' is not supported: send the request body uncompressed (chunked alone is taken).`,
  );
}

interface AjvError {
  instancePath: string;
  schemaPath: string;
  keyword: string;
  message?: string;
  params: Record<string, unknown>;
}

/**
 * The error to name. A value that matches none of a union's shapes gets
 * one error per shape and then the union's: the shape it came closest to
 * (a deeper path, or a rule other than its type, as `[]` for "a text or a
 * non-empty list") says more than the first shape's "must be string".
 */
function mostTelling(errors: AjvError[]): AjvError {
  const first = errors[0] as AjvError;
  const union = errors.find((x) => x.keyword === 'anyOf' && x.instancePath === first.instancePath);
  if (!union) return first;
  const branches = errors.filter((x) => x !== union && x.instancePath.startsWith(first.instancePath));
  const deeper = branches.filter((x) => x.instancePath !== first.instancePath);
  if (deeper.length > 0) return deeper.reduce((a, b) => (b.instancePath.length > a.instancePath.length ? b : a));
  const rule = branches.find((x) => x.keyword !== 'type');
  if (rule) return rule;
  const types = [...new Set(branches.map((x) => x.params['type']).filter((t) => typeof t === 'string'))];
  return types.length > 1 ? { ...first, message: `must be ${types.join(' or ')}` } : first;
}

/**
 * The fields that would do in place of a missing one, where a union asks for any of them (a file part's `file_data`
 * or `file_id`): `' (or 'file_id')'`, so that the refusal does not read as if only the one named would do.
 */
function otherwiseRequired(errors: AjvError[], first: AjvError, missing: string): string {
  if (!errors.some((x) => x.keyword === 'anyOf' && x.instancePath === first.instancePath)) return '';
  const others = errors
    .filter((x) => x.keyword === 'required' && x.instancePath === first.instancePath && x.params['missingProperty'] !== missing)
    .map((x) => `'${String(x.params['missingProperty'])}'`);
  return others.length === 0 ? '' : ` (or ${[...new Set(others)].join(' or ')})`;
}

/** The values a field may take, when its rule lists them (an enum, or a union of constants): at most a dozen. */
function allowedValues(errors: AjvError[], first: AjvError): string | null {
  const listed = first.params['allowedValues'];
  const values = Array.isArray(listed)
    ? listed
    : errors.filter((x) => x.instancePath === first.instancePath && x.keyword === 'const').map((x) => x.params['allowedValue']);
  if (values.length === 0 || values.length > 12) return null;
  return values.map((v) => JSON.stringify(v)).join(', ');
}

/**
 * Embeddings input sent as token ids (lists of integers), as LangChain's OpenAIEmbeddings does by default: OpenAI takes
 * them, the providers behind this gateway take text only. Said so, rather than that the first id 'must be string'.
 */
function tokenIdsRefusal(errors: AjvError[], body: unknown): GatewayError | null {
  if (!errors.some((x) => x.schemaPath.startsWith('#/properties/input/'))) return null;
  const input = (body as { input?: unknown } | null | undefined)?.input;
  const ids = (v: unknown) => typeof v === 'number' || (Array.isArray(v) && v.length > 0 && v.every((t) => typeof t === 'number'));
  if (!Array.isArray(input) || input.length === 0 || !input.every(ids)) return null;
  return new GatewayError(
    'validation',
    "Invalid body: 'input' must be text, a string or a list of strings: token ids (lists of integers) are not taken; send the text itself.",
    { param: 'input' },
  );
}

/** Fields of an older API version that a client library still sends, and what takes their place here. */
const NEWER_NAMES: Readonly<Record<string, string>> = {
  max_chunks_per_doc: "Cohere's v1 chunk count; documents are cut by 'max_tokens_per_doc' (its v2 field) here",
};

/** Ajv's size rules in plain words: 'must NOT have fewer than 1 items' reads as a riddle. */
const SIZE_WORDS: Readonly<Record<string, (n: number) => string>> = {
  minLength: (n) => (n === 1 ? 'must not be empty' : `must be at least ${n} characters long`),
  maxLength: (n) => `must be at most ${n} characters long`,
  minItems: (n) => (n === 1 ? 'must not be empty' : `must have at least ${n} items`),
  maxItems: (n) => `must have at most ${n} items`,
  // An admin PATCH with nothing to change: Ajv said 'must NOT have fewer than 1 properties'.
  minProperties: (n) => (n === 1 ? 'must have at least one field' : `must have at least ${n} fields`),
};

/** Turns Ajv's first error into a message naming the field, e.g. `'temperature' must be <= 2`. */
function validationError(e: FastifyError, body: unknown): GatewayError {
  const errors = e.validation as unknown as AjvError[];
  const where = (e as { validationContext?: string }).validationContext ?? 'body';
  const tokens = where === 'body' ? tokenIdsRefusal(errors, body) : null;
  if (tokens) return tokens;
  const first = mostTelling(errors);
  const path = first.instancePath.replace(/^\//, '').replace(/\//g, '.');
  const missing = first.params['missingProperty'];
  const extra = first.params['additionalProperty'];
  let field = path;
  let detail = first.message ?? 'is invalid';
  if (first.keyword === 'required' && typeof missing === 'string') {
    field = path ? `${path}.${missing}` : missing;
    detail = `is required${otherwiseRequired(errors, first, missing)}`;
  } else if (first.keyword === 'additionalProperties' && typeof extra === 'string') {
    field = path ? `${path}.${extra}` : extra;
    // Own names only: a field named `constructor` or `toString` is no older name for Object's.
    const successor = Object.hasOwn(NEWER_NAMES, extra) ? NEWER_NAMES[extra] : undefined;
    detail = successor ? `is not a known field: ${successor}` : 'is not a known field';
  } else if (first.keyword === 'type' && Object.hasOwn(NEWER_NAMES, path)) {
    // Such a field is taken only as null (not given), as the older client sends it unset.
    detail = `is not taken: ${NEWER_NAMES[path]}`;
  } else if (first.keyword === 'pattern' && typeof first.params['pattern'] === 'string' && PATTERN_MEANINGS[first.params['pattern']]) {
    detail = PATTERN_MEANINGS[first.params['pattern']] as string;
  } else if (first.keyword === 'enum' || first.keyword === 'const' || first.keyword === 'anyOf') {
    const allowed = allowedValues(errors, first);
    detail = allowed === null ? 'has a value that is not allowed' : `has a value that is not allowed (allowed: ${allowed})`;
  } else if ((first.keyword === 'minimum' || first.keyword === 'maximum') && Math.abs(first.params['limit'] as number) === 2 ** 63) {
    // int64's ends (`seed`), which Ajv would write as a double reads them: 9223372036854776000, past int64.
    detail = 'must be a 64-bit integer, from -9223372036854775808 to 9223372036854775807';
  } else if (Object.hasOwn(SIZE_WORDS, first.keyword) && typeof first.params['limit'] === 'number') {
    detail = (SIZE_WORDS[first.keyword] as (n: number) => string)(first.params['limit']);
  } else if (where === 'body' && path === '' && first.keyword === 'type') {
    // No body at all (a POST without one, or without a Content-Type), or valid JSON that is not an object: said so,
    // with what was sent, rather than as Ajv's 'must be object'.
    if (body === undefined) return emptyBody();
    detail = `must be a JSON object, not ${body === null ? 'null' : Array.isArray(body) ? 'an array' : `a ${typeof body}`}`;
  }
  const label = field ? `'${field}'` : `the ${where}`;
  return new GatewayError('validation', `Invalid ${where}: ${label} ${detail}.`, { param: field || null });
}

/** An error's status and envelope (OpenAI's shape) in a variant: every answer of an error is made of these. */
export function errorEnvelope(g: GatewayError, variant: Variant): { status: number; body: string } {
  // `param` too: it names what the client sent, which may be a key (`?gw_live_…`, or a field named after one).
  return errorJson(g.code, variant, redactSecrets(g.message), g.param === null ? null : redactSecrets(g.param));
}

/** How often a refusal for an unreachable store (or Redis) is logged at warn, with its cause; the others at debug. */
const STORE_WARN_EVERY_MS = 60_000;
/** When each kind of refusal was last logged at warn: a Redis stall's refusals do not hide a database outage's. */
const warnedAt = { store: Number.NEGATIVE_INFINITY, budgets: Number.NEGATIVE_INFINITY, resumeBuffer: Number.NEGATIVE_INFINITY };

/**
 * A database outage refuses every key not yet cached (503), which the access log shows only as 503s: the first such
 * refusal says why, once a minute while it lasts, rather than once per request. A refusal for Redis (a budget that
 * neither Redis nor the database's leases could hold, a resume whose buffer could not be read) names Redis: while
 * Redis stalled, they were said as the store being unreachable, which sent an operator to a database that answered.
 */
function logStoreUnreachable(request: FastifyRequest, cause: unknown): void {
  let kind: keyof typeof warnedAt;
  let fields: object;
  let message: string;
  if (cause instanceof BudgetsUnavailableError) {
    kind = 'budgets';
    fields = { redis: cause.redis === null ? null : errorSummary(cause.redis), database: cause.database === null ? null : errorSummary(cause.database) };
    message =
      "budgets cannot be held: Redis did not answer and the database's budget lease failed; requests of keys with a budget are answered 503 until either is back";
  } else if (cause instanceof ResumeBufferUnavailableError) {
    kind = 'resumeBuffer';
    fields = { err: errorSummary(cause.cause) };
    message = 'stream resume buffer (Redis) unreachable: resumes of streams this instance does not relay are answered 503';
  } else {
    kind = 'store';
    fields = { err: errorSummary(cause) };
    message = 'store unreachable: requests that need it (a key or workspace not cached, an admin call) are answered 503';
  }
  const now = Date.now();
  if (now - warnedAt[kind] < STORE_WARN_EVERY_MS) {
    request.log.debug(fields, `${message.slice(0, message.indexOf(':'))}: answered 503`);
    return;
  }
  warnedAt[kind] = now;
  request.log.warn(fields, `${message} (said once a minute while it lasts)`);
}

/** When a request refused for want of the instance's own resources was last logged at warn. */
let resourcesWarnedAt = Number.NEGATIVE_INFINITY;

/**
 * Refusals for want of file descriptors, ports or body memory come in bursts, one per request: the first says why at warn, then
 * once every 10 s while they last, the others at debug.
 */
function logOutOfResources(request: FastifyRequest, g: GatewayError): void {
  const now = Date.now();
  if (now - resourcesWarnedAt < 10_000) {
    request.log.debug('out of resources: answered 503');
    return;
  }
  resourcesWarnedAt = now;
  const why = g.message.endsWith(SEND_AGAIN) ? g.message.slice(0, -SEND_AGAIN.length) : g.message;
  request.log.warn(`${why}: answered 503 while it lasts (said every 10 s)`);
}

/** Answers an error in the variant's envelope and remembers its code for the usage record. */
export function sendError(err: unknown, request: FastifyRequest, reply: FastifyReply, variant: Variant): FastifyReply {
  // A client that left while a piped answer (a replayed stream) was being written, or before its first byte (a stream
  // with an idempotency key, which goes on for the retry): nothing to answer, nothing gone wrong here.
  if ((err as { code?: unknown } | null)?.code === 'ERR_STREAM_PREMATURE_CLOSE' && (reply.raw.headersSent || leftBeforeAnswer(reply.raw))) {
    request.log.debug('the client left while its answer was being written');
    return reply;
  }
  const g = toGatewayError(err, request.headers, request.routeOptions.bodyLimit, request.body, request);
  const { status, body } = errorEnvelope(g, variant);
  if (status >= 500 && g.code === 'internal') request.log.error({ err: errorSummary(g.cause ?? err) }, 'unhandled error');
  if (g.code === 'store_unavailable') logStoreUnreachable(request, g.cause ?? err);
  else if (g.code === 'out_of_resources') logOutOfResources(request, g);
  if (request.gw) {
    request.gw.errorCode = g.code;
    // Refused before its variant's own hooks ran (a 404 under /alt/v1, a missing Host): its metrics line says the variant too.
    request.gw.variant = variant;
  }
  // Fastify closes after any body parser error (an empty or invalid JSON body), in case more of the body is to come;
  // setAnswerHeaders closes when some of it is unread, so with the body read to its end, or none sent, the client
  // keeps its connection. Here rather than in onSend: only an error can carry it, and every answer goes through onSend.
  // Said as every other answer says it: a removed header would make Node send neither it nor Keep-Alive's timeout.
  if (reply.getHeader('connection') === 'close' && reply.raw.shouldKeepAlive) {
    reply.header('connection', 'keep-alive');
    reply.header('keep-alive', `timeout=${Math.floor(request.server.server.keepAliveTimeout / 1000)}`);
  }
  for (const [name, value] of Object.entries(g.headers)) reply.header(name, value);
  if (g.retryAfterS !== undefined) {
    reply.header(H.retryAfter, String(g.retryAfterS));
    reply.header(H.retryAfterMs, String(g.retryAfterMs));
  }
  // Errors a retry cannot fix: the OpenAI SDK retries every 5xx (and would spend the key's limit on each) unless told not to.
  if ((g.code === 'budget_exceeded' || g.code === 'not_implemented') && g.headers[H.shouldRetry] === undefined) reply.header(H.shouldRetry, 'false');
  return reply.code(status).type('application/json; charset=utf-8').send(body);
}
