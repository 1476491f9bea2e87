/** Cohere native v2 rerank and embed, its models list, its compatibility API's chat and `{id, message}` errors (PROVIDERS §10). */
import { bearer, isRecord, uuid } from '../core/http.js';
import { rank } from '../gen/rerank.js';
import { tokensOf } from '../gen/text.js';
import { EMBEDDING_TYPES, type EmbeddingType, embedText, encodeAs } from '../gen/vectors.js';
import { cohereCompatChat, cohereCompatEmbeddings } from './cohere-compat.js';
import type { ErrorSpec, HandlerCtx, ProviderView, RenderedError, Reply, Wire } from './types.js';

const META = { api_version: { version: '2', is_experimental: false } };

export function cohereWire(): Wire {
  return {
    type: 'cohere',
    route(method, path) {
      if (method === 'GET' && path === '/v1/models') return { endpoint: 'models', body: 'none', handle: (ctx) => modelsList(ctx.provider, ctx.query) };
      if (method === 'GET' && path.startsWith('/v1/models/')) {
        const id = decodeURIComponent(path.slice('/v1/models/'.length));
        return { endpoint: 'models', body: 'none', handle: (ctx) => (ctx.provider.hosts(id) ? { type: 'json', body: entry(ctx.provider, id) } : notFound(id)) };
      }
      if (method === 'POST' && path === '/v2/rerank') return { endpoint: 'rerank', body: 'json', handle: rerank };
      if (method === 'POST' && path === '/v2/embed') return { endpoint: 'embeddings', body: 'json', handle: embed };
      if (method === 'POST' && path === '/compatibility/v1/chat/completions') return { endpoint: 'chat', body: 'json', handle: cohereCompatChat };
      if (method === 'POST' && path === '/compatibility/v1/embeddings') return { endpoint: 'embeddings', body: 'json', handle: cohereCompatEmbeddings };
      return null;
    },
    auth(headers, apiKey) {
      const key = bearer(headers);
      if (key === undefined) return 'missing';
      return key === apiKey ? 'ok' : 'invalid';
    },
    error: renderError,
    headers: () => ({ 'x-debug-trace-id': uuid().replaceAll('-', ''), 'x-endpoint-monthly-call-limit': '1000' }),
  };
}

const MESSAGES: Record<ErrorSpec['kind'], string> = {
  auth_missing: 'no api key supplied',
  auth_invalid: 'invalid api token',
  route_not_found: 'not found',
  model_not_found: 'model not found, make sure the correct model ID was used and that you have access to the model.',
  bad_request: 'invalid request',
  too_large: 'request entity too large',
  rate_limit: 'You are past the rate limit for this API key. Please wait and try again, or contact support@cohere.com to raise it.',
  server: 'internal server error, this has been reported to our developers',
  bad_gateway: 'bad gateway',
  unavailable: 'service unavailable: the model is overloaded, please try again later',
  timeout: 'gateway timeout',
  other: 'request failed',
};

function renderError(spec: ErrorSpec): RenderedError {
  let message = spec.message ?? MESSAGES[spec.kind];
  if (spec.kind === 'model_not_found' && spec.model && spec.message === undefined)
    message = `model '${spec.model}' not found, make sure the correct model ID was used and that you have access to the model.`;
  return { status: spec.status, body: { id: uuid(), message } };
}

const bad = (message: string): Reply => ({ type: 'error', error: { status: 400, kind: 'bad_request', message: `invalid request: ${message}` } });
const notFound = (model: string): Reply => ({ type: 'error', error: { status: 404, kind: 'model_not_found', model } });

function modelCheck(ctx: HandlerCtx, kind: 'rerank' | 'embedding'): Reply | null {
  const model = ctx.model;
  if (model === null) return bad('model must be provided');
  if (!ctx.provider.hosts(model)) return notFound(model);
  if (ctx.provider.info(model).kind !== kind) return bad(`model '${model}' does not support ${kind === 'rerank' ? 'rerank' : 'embed'}`);
  return null;
}

function rerank(ctx: HandlerCtx): Reply {
  const b = ctx.json;
  if (!isRecord(b)) return bad('body must be a JSON object');
  const failed = modelCheck(ctx, 'rerank');
  if (failed) return failed;
  const query = b['query'];
  const docs = b['documents'];
  if (typeof query !== 'string' || query.trim() === '') return bad('query must not be empty');
  if (!Array.isArray(docs) || docs.length === 0) return bad('list of documents must not be empty');
  if (!docs.every((d) => typeof d === 'string')) return bad('documents must be a list of strings');
  const topN = b['top_n'];
  if (topN !== undefined && (typeof topN !== 'number' || !Number.isInteger(topN) || topN < 1)) return bad('top_n must be a positive integer');
  const results = rank(query, docs as string[], topN as number | undefined).map((r) => ({ index: r.index, relevance_score: r.score }));
  return { type: 'json', body: { id: uuid(), results, meta: { ...META, billed_units: { search_units: Math.ceil(docs.length / 100) } } }, tokens: 1 };
}

const INPUT_TYPES = ['search_document', 'search_query', 'classification', 'clustering', 'image'];

function embed(ctx: HandlerCtx): Reply {
  const b = ctx.json;
  if (!isRecord(b)) return bad('body must be a JSON object');
  const failed = modelCheck(ctx, 'embedding');
  if (failed) return failed;
  const model = ctx.model as string;
  if (typeof b['input_type'] !== 'string' || !INPUT_TYPES.includes(b['input_type'])) return bad('valid input_type must be provided with the provided model');
  const texts = b['texts'];
  if (!Array.isArray(texts) || texts.length === 0 || !texts.every((t) => typeof t === 'string')) return bad('texts must be a non-empty list of strings');
  if (texts.length > 96) return bad(`too many texts: ${texts.length}, the maximum is 96`);
  const types = (b['embedding_types'] ?? ['float']) as unknown;
  if (!Array.isArray(types) || !types.every((t) => (EMBEDDING_TYPES as readonly unknown[]).includes(t))) {
    return bad(`embedding_types must be a list of ${EMBEDDING_TYPES.join(', ')}`);
  }
  const info = ctx.provider.info(model);
  const native = info.dim ?? 1024;
  const asked = b['output_dimension'];
  if (asked !== undefined && asked !== null) {
    if (!info.matryoshka) return bad(`output_dimension is not supported by ${model}`);
    if (![256, 512, 1024, 1536].includes(asked as number) || (asked as number) > native) return bad('output_dimension must be one of 256, 512, 1024, 1536');
  }
  const dim = typeof asked === 'number' ? asked : native;
  const truncate = b['truncate'] ?? 'END';
  if (truncate !== 'NONE' && truncate !== 'START' && truncate !== 'END') return bad('truncate must be one of NONE, START, END');
  const kept: string[] = [];
  for (const [i, t] of (texts as string[]).entries()) {
    const cut = cutToContext(t, info.contextLength, truncate);
    if (cut === null) return bad(`text at index ${i} has ${tokensOf(t)} tokens, more than the model's ${info.contextLength}; set truncate to END or START`);
    kept.push(cut);
  }
  const vectors = kept.map((t) => embedText(t, dim));
  const embeddings: Record<string, unknown> = {};
  for (const t of types as EmbeddingType[]) embeddings[t] = vectors.map((v) => encodeAs(v, t));
  // Billed for what was embedded: a text cut to the context is billed the context.
  const tokens = kept.reduce((n, t) => n + Math.max(1, tokensOf(t)), 0);
  return {
    type: 'json',
    body: { id: uuid(), texts, embeddings, meta: { ...META, billed_units: { input_tokens: tokens } }, response_type: 'embeddings_by_type' },
    tokens: 1,
  };
}

/**
 * A text longer than the model's context, as Cohere's `truncate` says: END (its default) keeps the start, START keeps
 * the end, NONE refuses it (null). Tokens are the simulator's 4 characters.
 */
function cutToContext(text: string, context: number, truncate: 'NONE' | 'START' | 'END'): string | null {
  if (context <= 0 || tokensOf(text) <= context) return text;
  if (truncate === 'NONE') return null;
  return truncate === 'END' ? text.slice(0, context * 4) : text.slice(text.length - context * 4);
}

function entry(p: ProviderView, name: string): Record<string, unknown> {
  const info = p.info(name);
  const endpoints = info.kind === 'rerank' ? ['rerank'] : info.kind === 'embedding' ? ['embed', 'embed_jobs'] : ['chat'];
  return {
    name,
    endpoints,
    finetuned: false,
    context_length: info.contextLength,
    tokenizer_url: `https://storage.googleapis.com/cohere-public/tokenizers/${name}.json`,
    default_endpoints: [],
    features: info.kind === 'embedding' ? ['embedding_types'] : [],
    is_deprecated: info.deprecation !== undefined,
  };
}

function modelsList(p: ProviderView, q: URLSearchParams): Reply {
  const endpoint = q.get('endpoint');
  let models = p.models().map((id) => entry(p, id));
  if (endpoint) models = models.filter((m) => (m['endpoints'] as string[]).includes(endpoint));
  const size = Number(q.get('page_size') ?? '1000') || 1000;
  const start = Number(q.get('page_token') ?? '0') || 0;
  const page = models.slice(start, start + size);
  const next = start + size < models.length ? String(start + size) : undefined;
  return { type: 'json', body: next === undefined ? { models: page } : { models: page, next_page_token: next } };
}
