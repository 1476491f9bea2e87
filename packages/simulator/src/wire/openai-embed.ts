/** OpenAI-compatible embeddings (also Azure) and Scaleway's Jina-style rerank (PROVIDERS §1.3, §5). */
import { hex, isRecord, nowSeconds } from '../core/http.js';
import { rank } from '../gen/rerank.js';
import { tokensOf } from '../gen/text.js';
import { embedText, toBase64 } from '../gen/vectors.js';
import type { ErrorSpec, HandlerCtx, Reply } from './types.js';

export interface EmbedFlavor {
  /** Honour `dimensions` and `encoding_format` (Scaleway documents both as unsupported and ignores them). */
  honourOptions: boolean;
  /** vLLM adds `id` and `created`. */
  vllm: boolean;
  responseModel?: string;
  /** Cut each input to the model's context (Cohere's default `truncate: END`) instead of refusing a longer one. */
  truncate?: boolean;
}

/** `input` as a list of texts (token-id arrays are joined, as a stand-in). */
export function inputTexts(input: unknown): string[] | null {
  if (typeof input === 'string') return [input];
  if (!Array.isArray(input) || input.length === 0) return null;
  if (input.every((x) => typeof x === 'number')) return [input.join(' ')];
  const out: string[] = [];
  for (const x of input) {
    if (typeof x === 'string') out.push(x);
    else if (Array.isArray(x)) out.push(x.join(' '));
    else return null;
  }
  return out;
}

function checkModel(ctx: HandlerCtx, kinds: string[]): ErrorSpec | null {
  const model = ctx.model;
  if (model === null) return { status: 400, kind: 'bad_request', message: 'Field required: model', param: 'model' };
  if (!ctx.provider.hosts(model)) return { status: 404, kind: 'model_not_found', model, param: 'model' };
  const kind = ctx.provider.info(model).kind;
  if (!kinds.includes(kind)) return { status: 400, kind: 'bad_request', message: `Model ${model} does not support this endpoint.`, param: 'model' };
  return null;
}

/**
 * The refusal of an input longer than the model's context, in the words of vLLM (the OpenAI-compatible hosts) or of
 * OpenAI (Azure); each input is embedded alone, so each is held to the context. Nothing is truncated, nothing billed.
 */
function overContext(texts: string[], context: number, vllm: boolean): ErrorSpec | null {
  const longest = Math.max(...texts.map(tokensOf));
  if (context <= 0 || longest <= context) return null;
  const message = vllm
    ? `This model's maximum context length is ${context} tokens. However, you requested ${longest} tokens in the input for embedding generation. Please reduce the length of the input.`
    : `This model's maximum context length is ${context} tokens, however you requested ${longest} tokens (${longest} in your prompt; 0 for the completion). Please reduce your prompt; or completion length.`;
  return { status: 400, kind: 'bad_request', message };
}

export function embeddingsReply(ctx: HandlerCtx, f: EmbedFlavor): Reply {
  const body = ctx.json;
  if (!isRecord(body)) return { type: 'error', error: { status: 400, kind: 'bad_request', message: 'Request body must be a JSON object.' } };
  const bad = checkModel(ctx, ['embedding']);
  if (bad) return { type: 'error', error: bad };
  const model = ctx.model as string;
  const given = inputTexts(body['input']);
  if (given === null)
    return { type: 'error', error: { status: 400, kind: 'bad_request', message: 'input must be a non-empty string or array', param: 'input' } };
  const context = ctx.provider.info(model).contextLength;
  const texts = f.truncate && context > 0 ? given.map((t) => t.slice(0, context * 4)) : given;
  const tooLong = overContext(texts, context, f.vllm);
  if (tooLong) return { type: 'error', error: tooLong };
  const native = ctx.provider.info(model).dim ?? 1024;
  let dim = native;
  const asked = body['dimensions'];
  if (f.honourOptions && asked !== undefined && asked !== null) {
    if (typeof asked !== 'number' || !Number.isInteger(asked) || asked < 1 || asked > native) {
      return {
        type: 'error',
        error: { status: 400, kind: 'bad_request', message: `dimensions must be an integer between 1 and ${native}`, param: 'dimensions' },
      };
    }
    dim = asked;
  }
  const encoding = body['encoding_format'];
  if (f.honourOptions && encoding !== undefined && encoding !== 'float' && encoding !== 'base64') {
    return { type: 'error', error: { status: 400, kind: 'bad_request', message: "encoding_format must be 'float' or 'base64'", param: 'encoding_format' } };
  }
  const b64 = f.honourOptions && encoding === 'base64';
  const data = texts.map((t, index) => {
    const v = embedText(t, dim);
    return { object: 'embedding', index, embedding: b64 ? toBase64(v) : v };
  });
  const tokens = texts.reduce((n, t) => n + Math.max(1, tokensOf(t)), 0);
  const out: Record<string, unknown> = f.vllm ? { id: `embd-${hex(16)}`, object: 'list', created: nowSeconds() } : { object: 'list' };
  Object.assign(out, { model: f.responseModel ?? model, data, usage: { prompt_tokens: tokens, total_tokens: tokens } });
  return { type: 'json', body: out, tokens: 1 };
}

/** Scaleway `POST /v1/rerank`: echoes documents, `usage` instead of Cohere's `meta`. */
export function scalewayRerankReply(ctx: HandlerCtx): Reply {
  const body = ctx.json;
  if (!isRecord(body)) return { type: 'error', error: { status: 400, kind: 'bad_request', message: 'Request body must be a JSON object.' } };
  const bad = checkModel(ctx, ['embedding', 'rerank']);
  if (bad) return { type: 'error', error: bad };
  const query = body['query'];
  const docs = body['documents'];
  if (typeof query !== 'string' || !Array.isArray(docs) || !docs.every((d) => typeof d === 'string')) {
    return { type: 'error', error: { status: 400, kind: 'bad_request', message: 'query must be a string and documents a list of strings' } };
  }
  const topN = typeof body['top_n'] === 'number' ? body['top_n'] : undefined;
  const results = rank(query, docs, topN).map((r) => ({ index: r.index, document: { text: docs[r.index], multi_modal: null }, relevance_score: r.score }));
  const total = tokensOf(query) * docs.length + docs.reduce((n, d) => n + tokensOf(d), 0);
  return { type: 'json', body: { id: `rerank-${hex(16)}`, model: ctx.model, usage: { total_tokens: total }, results }, tokens: 1 };
}
