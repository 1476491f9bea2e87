import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { GatewayError } from '../errors/gateway-error.js';
import { redactedHead } from '../lib/redact.js';

const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;

/** Longest path an error repeats: a client's 16 KB path is not sent back whole (no route is that long). */
const PATH_ECHO_MAX = 200;

/** The path as a 404 or 405 repeats it: at most {@link PATH_ECHO_MAX} characters, a key in it redacted before the cut. */
function shown(path: string): string {
  return redactedHead(path, PATH_ECHO_MAX);
}

/**
 * The error for a request no route takes: 405 with `Allow` when the path has routes for other methods (RFC 9110
 * 15.5.6, as OpenAI answers a GET to /v1/chat/completions), else 404.
 */
export function noRouteError(app: FastifyInstance, request: FastifyRequest, reply: FastifyReply, what = 'route'): GatewayError {
  const path = request.url.split('?')[0] ?? '/';
  // A trailing slash can make a collection's path read as its item's with an empty id (POST /admin/v1/keys/ as
  // PATCH /keys/:id): the route meant, rather than a 405 that names the item's methods (`takes` ignores those).
  const spelling = spellingHint(app, request.method, path);
  if (spelling !== '') return new GatewayError('not_found', `No ${what} ${request.method} ${shown(path)}.${spelling}`);
  const allowed = allowedMethods(app, path, request.method);
  if (allowed.length === 0) {
    const hint =
      spellingHint(app, request.method, path, true) ||
      baseHint(app, request.method, path) ||
      cohereRouteHint(request.method, path) ||
      openAiRouteHint(request.method, path);
    return new GatewayError('not_found', `No ${what} ${request.method} ${shown(path)}.${hint}`);
  }
  reply.header('allow', allowed.join(', '));
  return new GatewayError('method_not_allowed', `${request.method} is not allowed on ${shown(path)}; use ${allowed.join(' or ')}.`);
}

/** The methods `path` has routes for, but `except`: what a 405's `Allow` lists. */
export function allowedMethods(app: FastifyInstance, path: string, except?: string): string[] {
  return METHODS.filter((method) => method !== except && takes(app, method, path));
}

/**
 * Whether a route takes the path as a whole: `/keys/` reaches `/keys/:id` only with an empty id, which is a slash
 * slip, not the item's path (DELETE /admin/v1/keys/ is no 405 naming the item's methods).
 */
function takes(app: FastifyInstance, method: (typeof METHODS)[number], path: string): boolean {
  const found = app.findRoute({ method, url: path });
  return found !== null && !Object.values(found.params ?? {}).includes('');
}

/**
 * A request that reached an item's route with an empty parameter (GET /v1/models/ as /models/:id, /models//x as
 * /models/:family/:model): the 404 naming the route meant, as a path off by a slash gets, rather than a 400 about the
 * empty id. Null otherwise. Called on routes with parameters only, before their schema is checked.
 */
export function emptyParamError(app: FastifyInstance, request: FastifyRequest, what = 'route'): GatewayError | null {
  const params = request.params;
  if (params === null || typeof params !== 'object' || !Object.values(params).includes('')) return null;
  const path = request.url.split('?')[0] ?? '/';
  return new GatewayError('not_found', `No ${what} ${request.method} ${shown(path)}.${spellingHint(app, request.method, path, true)}`);
}

/** A path that misses only the base address's `/v1` (a client configured with the host alone): where it is. */
function baseHint(app: FastifyInstance, method: string, path: string): string {
  const known = METHODS.find((m) => m === method);
  const candidate = path.startsWith('/alt/') ? `/alt/v1${path.slice(4)}` : `/v1${path}`;
  const found = known !== undefined && app.findRoute({ method: known, url: candidate }) !== null;
  return found ? ` Did you mean ${shown(candidate)}? The base address ends in /v1 (variant B: /alt/v1).` : '';
}

/**
 * A path that differs from a route only in doubled or trailing slashes (a base address ending in `/` joined to a
 * path), or in letter case: which route. Paths are matched as they are, as OpenAI's are; the 404 says what to send.
 * `anyMethod`: when no such route takes the method, one that takes another (its 405 then names them), for a path
 * that has no route of its own (DELETE /admin/v1/keys/ means /admin/v1/keys, not an item with an empty id).
 */
export function spellingHint(app: FastifyInstance, method: string, path: string, anyMethod = false): string {
  const slashes = path.replace(/\/{2,}/g, '/').replace(/(.)\/$/, '$1');
  const candidates = [slashes, slashes.toLowerCase()].filter((candidate) => candidate !== path);
  const known = METHODS.filter((m) => m === method);
  for (const methods of anyMethod ? [known, METHODS] : [known]) {
    const meant = candidates.find((candidate) => methods.some((m) => takes(app, m, candidate)));
    if (meant !== undefined) return ` Did you mean ${shown(meant)}? Paths are matched as written: in lower case, without doubled or trailing slashes.`;
  }
  return '';
}

/**
 * Cohere's SDK, pointed at the gateway for rerank, embeds and chats through Cohere's own routes (`/v1/embed`,
 * `/v2/chat`, …), which the gateway does not serve: say where those requests go, rather than leave a bare 404 that
 * reads like a wrong address.
 */
function cohereRouteHint(method: string, path: string): string {
  const match = /^(\/alt)?\/v[12]\/(embed|chat)\/?$/.exec(path);
  if (method !== 'POST' || !match) return '';
  const base = match[1] ? '/alt/v1' : '/v1';
  if (match[2] === 'chat') {
    return ` Cohere's chat API is not served here: chat is at POST ${base}/chat/completions in OpenAI's shape (Cohere's Command models too, as GET ${base}/models lists them).`;
  }
  return ` Cohere's embed API is not served here: embeddings are at POST ${base}/embeddings in OpenAI's shape (Cohere's models too, as GET ${base}/models lists them).`;
}

/**
 * OpenAI's Responses API (the newer SDKs' `responses.create`, and the Vercel AI SDK's `openai(model)` by default),
 * its legacy completions, and speech translation and synthesis are not served: say which route takes the same
 * request, or that none does, rather than a bare 404.
 */
function openAiRouteHint(method: string, path: string): string {
  const match = /^(\/alt)?\/v1\/(responses|completions|audio\/translations|audio\/speech)(\/.*)?$/.exec(path);
  if (method !== 'POST' || !match) return '';
  const base = match[1] ? '/alt/v1' : '/v1';
  // The SDK's audio.translations.create and audio.speech.create: what is served instead, or that nothing is.
  if (match[2] === 'audio/translations') {
    return ` Translation of speech into English is not served here: POST ${base}/audio/transcriptions transcribes it in the language spoken, and a chat model can translate the text.`;
  }
  if (match[2] === 'audio/speech') return ' Speech synthesis (text to speech) is not served by this gateway.';
  const chat = `POST ${base}/chat/completions`;
  if (match[2] === 'completions') return ` The legacy completions API is not served here: send the prompt as a user message to ${chat}.`;
  return ` OpenAI's Responses API is not served here: use ${chat} (OpenAI SDK: chat.completions.create; Vercel AI SDK: openai.chat(model) or @ai-sdk/openai-compatible).`;
}
