import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { GatewayError } from '../errors/gateway-error.js';

const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;

/**
 * The error for a request no route takes: 405 with `Allow` when the path has routes for other methods (RFC 9110
 * 15.5.6, as OpenAI answers a GET to /v1/chat/completions), else 404.
 */
export function noRouteError(app: FastifyInstance, request: FastifyRequest, reply: FastifyReply, what = 'route'): GatewayError {
  const path = request.url.split('?')[0] ?? '/';
  // A trailing slash can make a collection's path read as its item's with an empty id (POST /admin/v1/keys/ as
  // PATCH /keys/:id): the route meant, rather than a 405 that names the item's methods.
  const spelling = spellingHint(app, request.method, path);
  if (spelling !== '') return new GatewayError('not_found', `No ${what} ${request.method} ${path}.${spelling}`);
  const allowed = METHODS.filter((method) => method !== request.method && app.findRoute({ method, url: path }) !== null);
  if (allowed.length === 0) {
    const hint = baseHint(app, request.method, path) || cohereRouteHint(request.method, path) || openAiRouteHint(request.method, path);
    return new GatewayError('not_found', `No ${what} ${request.method} ${path}.${hint}`);
  }
  reply.header('allow', allowed.join(', '));
  return new GatewayError('method_not_allowed', `${request.method} is not allowed on ${path}; use ${allowed.join(' or ')}.`);
}

/** A path that misses only the base address's `/v1` (a client configured with the host alone): where it is. */
function baseHint(app: FastifyInstance, method: string, path: string): string {
  const known = METHODS.find((m) => m === method);
  const candidate = path.startsWith('/alt/') ? `/alt/v1${path.slice(4)}` : `/v1${path}`;
  const found = known !== undefined && app.findRoute({ method: known, url: candidate }) !== null;
  return found ? ` Did you mean ${candidate}? The base address ends in /v1 (variant B: /alt/v1).` : '';
}

/**
 * A path that differs from a route only in doubled or trailing slashes (a base address ending in `/` joined to a
 * path), or in letter case: which route. Paths are matched as they are, as OpenAI's are; the 404 says what to send.
 */
export function spellingHint(app: FastifyInstance, method: string, path: string): string {
  const known = METHODS.find((m) => m === method);
  if (known === undefined) return '';
  const slashes = path.replace(/\/{2,}/g, '/').replace(/(.)\/$/, '$1');
  for (const candidate of [slashes, slashes.toLowerCase()]) {
    if (candidate !== path && app.findRoute({ method: known, url: candidate }) !== null) {
      return ` Did you mean ${candidate}? Paths are matched as written: in lower case, without doubled or trailing slashes.`;
    }
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
 * OpenAI's Responses API (the newer SDKs' `responses.create`, and the Vercel AI SDK's `openai(model)` by default) and
 * its legacy completions are not served: say which route takes the same request, rather than a bare 404.
 */
function openAiRouteHint(method: string, path: string): string {
  const match = /^(\/alt)?\/v1\/(responses|completions)(\/.*)?$/.exec(path);
  if (method !== 'POST' || !match) return '';
  const chat = `POST ${match[1] ? '/alt/v1' : '/v1'}/chat/completions`;
  if (match[2] === 'completions') return ` The legacy completions API is not served here: send the prompt as a user message to ${chat}.`;
  return ` OpenAI's Responses API is not served here: use ${chat} (OpenAI SDK: chat.completions.create; Vercel AI SDK: openai.chat(model) or @ai-sdk/openai-compatible).`;
}
