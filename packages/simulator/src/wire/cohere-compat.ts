/**
 * Cohere's OpenAI compatibility API (PROVIDERS §2 "Cohere compat", §10.3): chat, `POST /compatibility/v1/chat/completions`
 * in OpenAI's shapes, with Cohere's `{id, message}` errors. It takes only the fields it documents: the ones it lists as
 * unsupported and the ones its list leaves out (`max_completion_tokens`, `stream_options`) are a 400, and
 * `reasoning_effort` is `none` or `high`. Its streams carry no usage, since only `stream_options` could ask for it.
 */
import { isRecord } from '../core/http.js';
import { chatReply, checkChat } from './openai-chat.js';
import { embeddingsReply } from './openai-embed.js';
import type { ErrorSpec, HandlerCtx, Reply } from './types.js';

/** Refused with a 400 whatever the value (PROVIDERS §10.3's unsupported list, then the fields it does not list). */
export const COHERE_COMPAT_REFUSED = [
  'store',
  'metadata',
  'logit_bias',
  'top_logprobs',
  'n',
  'modalities',
  'prediction',
  'audio',
  'service_tier',
  'parallel_tool_calls',
  'max_completion_tokens',
  'stream_options',
] as const;

const EFFORTS = ['none', 'high'];

function refused(body: Record<string, unknown>): ErrorSpec | null {
  const field = COHERE_COMPAT_REFUSED.find((key) => body[key] !== undefined && body[key] !== null);
  if (field !== undefined)
    return { status: 400, kind: 'bad_request', message: `invalid request: ${field} is not supported by the Compatibility API`, param: field };
  const effort = body['reasoning_effort'];
  if (effort !== undefined && effort !== null && !EFFORTS.includes(effort as string)) {
    return { status: 400, kind: 'bad_request', message: `invalid request: reasoning_effort must be one of ${EFFORTS.join(', ')}`, param: 'reasoning_effort' };
  }
  return null;
}

export function cohereCompatChat(ctx: HandlerCtx): Reply {
  const body = ctx.json;
  const bad = (isRecord(body) ? refused(body) : null) ?? checkChat(body, ctx.provider, ctx.model);
  if (bad) return { type: 'error', error: bad };
  const model = ctx.model as string;
  return chatReply(body as Record<string, unknown>, { provider: ctx.provider, responseModel: model, reasoningStyle: 'reasoning_content', azure: null }, model);
}

/** What its embeddings do not take (PROVIDERS §10.3: `input`, `model`, `encoding_format` only): a 400 whatever the value. */
const EMBED_REFUSED = ['dimensions', 'user'] as const;

/** `POST /compatibility/v1/embeddings`: OpenAI's list, each input cut to the model's context as Cohere's embed does by default. */
export function cohereCompatEmbeddings(ctx: HandlerCtx): Reply {
  const body = ctx.json;
  const field = isRecord(body) ? EMBED_REFUSED.find((key) => body[key] !== undefined && body[key] !== null) : undefined;
  if (field !== undefined) {
    return { type: 'error', error: { status: 400, kind: 'bad_request', message: `invalid request: ${field} is not supported by the Compatibility API` } };
  }
  return embeddingsReply(ctx, { honourOptions: true, vllm: false, truncate: true });
}
