/** Mistral La Plateforme (PROVIDERS §4): chat, embeddings, models, Voxtral transcription, its error shapes. */
import { bearer, header, hex, isRecord, uuid } from '../core/http.js';
import { field, fieldAll } from '../core/multipart.js';
import { isAudio, transcribe } from '../gen/audio.js';
import { tokensOf } from '../gen/text.js';
import { type EmbeddingType, embedText, encodeAs } from '../gen/vectors.js';
import { mistralChat, validationReply } from './mistral-chat.js';
import { validateEmbeddings } from './mistral-validate.js';
import { inputTexts } from './openai-embed.js';
import { defaultMessage } from './openai-errors.js';
import type { ErrorSpec, HandlerCtx, ProviderView, RenderedError, Reply, SseEvent, Wire } from './types.js';

export function mistralWire(): Wire {
  return {
    type: 'mistral',
    route(method, path) {
      if (method === 'GET' && path === '/v1/models')
        return {
          endpoint: 'models',
          body: 'none',
          handle: (ctx) => ({ type: 'json', body: { object: 'list', data: ctx.provider.models().map((id) => entry(ctx.provider, id)) } }),
        };
      if (method === 'GET' && path.startsWith('/v1/models/')) {
        const id = decodeURIComponent(path.slice('/v1/models/'.length));
        return {
          endpoint: 'models',
          body: 'none',
          handle: (ctx) =>
            ctx.provider.hosts(id)
              ? { type: 'json', body: entry(ctx.provider, id) }
              : { type: 'error', error: { status: 404, kind: 'route_not_found', message: `Model ${id} not found` } },
        };
      }
      if (method !== 'POST') return null;
      if (path === '/v1/chat/completions') return { endpoint: 'chat', body: 'json', handle: mistralChat };
      if (path === '/v1/embeddings') return { endpoint: 'embeddings', body: 'json', handle: embeddings };
      if (path === '/v1/audio/transcriptions') return { endpoint: 'transcriptions', body: 'multipart', handle: transcription };
      return null;
    },
    auth(headers, apiKey) {
      const key = bearer(headers) ?? header(headers, 'x-api-key');
      if (key === undefined) return 'missing';
      return key === apiKey ? 'ok' : 'invalid';
    },
    error: renderError,
    headers: () => ({
      'mistral-correlation-id': uuid(),
      'x-kong-request-id': hex(16),
      'x-ratelimit-limit-req-minute': '600',
      'x-ratelimit-remaining-req-minute': '599',
      'x-ratelimit-limit-tokens-minute': '2000000',
      'x-ratelimit-remaining-tokens-minute': '1999000',
    }),
    sseContentType: 'text/event-stream; charset=utf-8',
  };
}

function renderError(spec: ErrorSpec): RenderedError {
  const msg = spec.message;
  switch (spec.kind) {
    case 'auth_missing':
    case 'auth_invalid':
      return { status: spec.status, body: spec.variant === 1 ? { detail: msg ?? 'Unauthorized' } : { message: msg ?? 'Unauthorized', request_id: hex(16) } };
    case 'route_not_found':
      return { status: spec.status, body: { detail: msg ?? 'Not Found' } };
    case 'model_not_found':
      return {
        status: spec.fixed ? spec.status : 400,
        body: { object: 'error', message: msg ?? `Invalid model: ${spec.model ?? ''}`, type: 'invalid_model', param: null, code: '1500' },
      };
    case 'rate_limit':
      return {
        status: spec.status,
        body:
          spec.variant === 1
            ? { object: 'error', message: msg ?? 'Rate limit exceeded', type: 'rate_limited', param: null, code: '1300', raw_status_code: 429 }
            : { message: msg ?? 'Requests rate limit exceeded' },
        headers: { 'x-ratelimit-remaining-req-minute': '0', 'x-ratelimit-remaining-tokens-minute': '0' },
      };
    case 'unavailable':
      return {
        status: spec.status,
        body: {
          object: 'error',
          message: msg ?? 'Service tier capacity exceeded for this model.',
          type: 'service_tier_capacity_exceeded',
          param: null,
          code: '3505',
        },
      };
    default: {
      const type = spec.status >= 500 ? 'server_error' : 'invalid_request_error';
      return { status: spec.status, body: { object: 'error', message: msg ?? defaultMessage(spec), type, param: spec.param ?? null, code: null } };
    }
  }
}

const CREATED = 1_756_746_619;

function entry(p: ProviderView, id: string): Record<string, unknown> {
  const info = p.info(id);
  const chat = info.kind === 'chat';
  return {
    id,
    object: 'model',
    created: CREATED,
    owned_by: 'mistralai',
    type: 'base',
    name: id,
    description: `${id} (simulated)`,
    max_context_length: info.contextLength || 32_768,
    aliases: (info.aliases ?? []).filter((a) => a !== id),
    deprecation: info.deprecation ?? null,
    deprecation_replacement_model: info.deprecationReplacement ?? null,
    default_model_temperature: chat ? 0.3 : null,
    capabilities: {
      completion_chat: chat,
      function_calling: chat && info.tools === true,
      completion_fim: false,
      fine_tuning: false,
      vision: info.vision === true,
      ocr: false,
      classification: false,
      moderation: false,
      audio: info.kind === 'audio',
      audio_transcription: info.kind === 'audio',
    },
  };
}

/** Mistral's limit on the tokens of one embeddings request, all inputs together (twice mistral-embed's context). */
const BATCH_TOKENS = 16_384;

function embeddings(ctx: HandlerCtx): Reply {
  const body = ctx.json;
  if (!isRecord(body))
    return validationReply([
      { type: 'model_attributes_type', loc: ['body'], msg: 'Input should be a valid dictionary or object to extract fields from', input: body ?? null },
    ]);
  const issues = validateEmbeddings(body);
  if (issues.length > 0) return validationReply(issues);
  const model = ctx.model as string;
  if (!ctx.provider.hosts(model)) return { type: 'error', error: { status: 400, kind: 'model_not_found', model } };
  const info = ctx.provider.info(model);
  if (info.kind !== 'embedding') return { type: 'error', error: { status: 400, kind: 'bad_request', message: `Model ${model} does not support embeddings.` } };
  const texts = inputTexts(body['input']);
  if (texts === null) return validationReply([{ type: 'string_type', loc: ['body', 'input'], msg: 'Input should be a valid string', input: body['input'] }]);
  // Each input is held to the model's context (Mistral truncates nothing), and the whole batch to its own limit.
  const longest = Math.max(...texts.map(tokensOf));
  if (info.contextLength > 0 && longest > info.contextLength) {
    return {
      type: 'error',
      error: { status: 400, kind: 'bad_request', message: `Too many tokens in input. Max is ${info.contextLength} got ${longest}` },
    };
  }
  const tokens = texts.reduce((n, t) => n + Math.max(1, tokensOf(t)), 0);
  if (tokens > BATCH_TOKENS) {
    return { type: 'error', error: { status: 400, kind: 'bad_request', message: `Too many tokens in batch. Max is ${BATCH_TOKENS} got ${tokens}` } };
  }
  const native = info.dim ?? 1024;
  const asked = body['output_dimension'];
  if (typeof asked === 'number' && (asked < 1 || asked > native || !info.matryoshka)) {
    return {
      type: 'error',
      error: { status: 400, kind: 'bad_request', message: `output_dimension must be between 1 and ${native} for ${model}`, param: 'output_dimension' },
    };
  }
  const dim = typeof asked === 'number' ? asked : native;
  const dtype = (body['output_dtype'] ?? 'float') as EmbeddingType;
  const b64 = body['encoding_format'] === 'base64' && dtype === 'float';
  const data = texts.map((t, index) => ({ object: 'embedding', embedding: encodeAs(embedText(t, dim), b64 ? 'base64' : dtype), index }));
  const usage = { prompt_tokens: tokens, completion_tokens: 0, total_tokens: tokens, prompt_audio_seconds: null };
  return { type: 'json', body: { id: hex(16), object: 'list', data, model, usage }, tokens: 1 };
}

const MAX_CONTEXT_BIAS = 100;

function transcription(ctx: HandlerCtx): Reply {
  const mp = ctx.multipart;
  const model = ctx.model;
  if (mp === null || model === null) return validationReply([{ type: 'missing', loc: ['body', 'model'], msg: 'Field required', input: null }]);
  if (!ctx.provider.hosts(model)) return { type: 'error', error: { status: 400, kind: 'model_not_found', model } };
  if (ctx.provider.info(model).kind !== 'audio')
    return { type: 'error', error: { status: 400, kind: 'bad_request', message: `Model ${model} does not support audio transcription.` } };
  const file = mp.files.find((f) => f.field === 'file');
  const url = field(mp, 'file_url');
  if (!file && url === undefined) {
    return {
      type: 'json',
      status: 400,
      body: { object: 'error', message: 'One of file, file_url or file_id must be provided.', type: 'invalid_request_error', param: null, code: null },
    };
  }
  if (file && !isAudio(file.data)) {
    return {
      type: 'json',
      status: 400,
      body: { object: 'error', message: 'Invalid file: the audio could not be decoded.', type: 'invalid_request_error', param: null, code: null },
    };
  }
  // context_bias: a list of terms (one field each, as Mistral's client sends it), at most 100 (PROVIDERS §4.5).
  const bias = fieldAll(mp, 'context_bias');
  if (bias.length > MAX_CONTEXT_BIAS) {
    return validationReply([
      {
        type: 'too_long',
        loc: ['body', 'context_bias'],
        msg: `List should have at most ${MAX_CONTEXT_BIAS} items after validation, not ${bias.length}`,
        input: bias,
        ctx: { field_type: 'List', max_length: MAX_CONTEXT_BIAS, actual_length: bias.length },
      },
    ]);
  }
  const granularities = fieldAll(mp, 'timestamp_granularities');
  const language = field(mp, 'language');
  if (granularities.length > 0 && language !== undefined) {
    return {
      type: 'json',
      status: 400,
      body: { object: 'error', message: 'timestamp_granularities is not compatible with language.', type: 'invalid_request_error', param: null, code: null },
    };
  }
  const t = transcribe(file?.data ?? Buffer.alloc(320_000));
  const segments = granularities.includes('word')
    ? t.words.map((w) => ({ type: 'transcription_segment', text: w.word, start: w.start, end: w.end, speaker_id: null }))
    : granularities.includes('segment')
      ? t.segments.map((s) => ({ type: 'transcription_segment', text: s.text, start: s.start, end: s.end, speaker_id: null }))
      : [];
  const seconds = Math.round(t.duration);
  const promptTokens = Math.ceil(t.duration * 12.5);
  const usage = { prompt_audio_seconds: seconds, prompt_tokens: promptTokens, completion_tokens: t.words.length, total_tokens: promptTokens + t.words.length };
  const out = { model, text: t.text, language: granularities.length > 0 ? null : (language ?? 'en'), segments, usage };
  if (field(mp, 'stream') !== 'true') return { type: 'json', body: out, tokens: t.words.length };
  const events: SseEvent[] = [{ event: 'transcription.language', data: { type: 'transcription.language', audio_language: language ?? 'en' } }];
  for (const [i, w] of t.words.entries())
    events.push({ event: 'transcription.text.delta', data: { type: 'transcription.text.delta', text: i === 0 ? w.word : ` ${w.word}` } });
  for (const s of segments) events.push({ event: 'transcription.segment', data: { ...s, type: 'transcription.segment' } });
  events.push({ event: 'transcription.done', data: { ...out, type: 'transcription.done' } });
  return { type: 'sse', events, done: false };
}
