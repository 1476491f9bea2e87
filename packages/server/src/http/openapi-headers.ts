import { ChatCompletionChunk, errorEnvelopeSchema, STRATEGIES } from '@gw/schema';

/**
 * The headers of the public API in the OpenAPI document. Fastify's route
 * schemas would validate declared headers themselves, with other errors
 * than the ones SPEC.md gives (routeOptions and the idempotency plugin
 * check them), so they are added to the generated document instead.
 */

interface Response {
  description?: string;
  headers?: Record<string, unknown>;
  content?: Record<string, { schema: unknown }>;
}
interface Operation {
  parameters?: unknown[];
  responses?: Record<string, Response | undefined>;
}
interface Document {
  paths?: Record<string, Record<string, Operation | undefined> | undefined>;
}

const ROUTED = ['/chat/completions', '/embeddings', '/rerank', '/audio/transcriptions'];

const headerParam = (name: string, description: string, schema: Record<string, unknown>) => ({ in: 'header', name, required: false, description, schema });

function routingParams(variant: 'a' | 'b'): unknown[] {
  return [
    headerParam('X-Gateway-Strategy', 'How the provider is chosen.', { type: 'string', enum: [...STRATEGIES], default: 'default' }),
    headerParam(
      'X-Gateway-Provider',
      variant === 'b'
        ? 'Pins the request to one provider; a provider that does not host the model answers 400 provider_unsupported.'
        : 'Pins the request to one provider.',
      { type: 'string' },
    ),
    headerParam('X-Gateway-Provider-Prefer', 'A soft preference: this provider first, the others on failure.', { type: 'string' }),
    headerParam('X-Gateway-Max-Hops', 'Failover hops to other providers after the first attempt.', { type: 'integer', minimum: 0, maximum: 5, default: 2 }),
  ];
}

const IDEMPOTENCY = headerParam(
  'X-Idempotency-Key',
  'Repeats of a request with the same key and body within 24 hours get the first answer (Idempotent-Replayed: true) without another upstream call; ' +
    'a repeat while the first is running gets 409 with Retry-After; the same key with another body gets 422. ' +
    "`Idempotency-Key` (the IETF draft's name) is taken as this header; both at once are a 400.",
  { type: 'string', minLength: 1, maxLength: 255 },
);
const LAST_EVENT_ID = headerParam(
  'Last-Event-ID',
  'Resumes an interrupted event stream after this event id (stream: true); a value that is no event id of this gateway is a 400.',
  { type: 'string' },
);

export const text = (description: string, required = false) => ({ description, required, schema: { type: 'string' } });
export const int = (description: string, required = false) => ({ description, required, schema: { type: 'integer' } });

/** The header every answer carries. */
export const requestIdHeader = () => text('The request identifier, for correlating logs.', true);

/**
 * On the repeat of an X-Idempotency-Key request that reached a provider and was not a 5xx (docs/routing.md): its
 * success, or its provider's refusal (400), given again without another upstream call.
 */
export const replayedHeader = () => ({
  description: 'true when this is the stored answer to an earlier request with the same X-Idempotency-Key, given again without another upstream call.',
  required: false,
  schema: { type: 'string', enum: ['true'] },
});

/**
 * The rate-limit headers, `required` where every such answer has them (each answer of a request that was counted).
 * `countRequired`: the key's count too, which a 429 of the embeddings beta leaves out (the key's limit did not refuse it).
 */
export function limitHeaders(required: boolean, countRequired = required): Record<string, unknown> {
  return {
    'X-RateLimit-Limit': int("The key's cap, requests per minute.", countRequired),
    'X-RateLimit-Remaining': int('Requests left in the current window.', countRequired),
    'X-RateLimit-Reset': int('Seconds until the oldest request in the window ages out.', countRequired),
    'X-RateLimit-Enforced': {
      description:
        'false when the limiter backend was unreachable: the request was let through, and Remaining and Reset count only what this instance let through.',
      required,
      schema: { type: 'boolean' },
    },
  };
}

/** `required`: X-Request-Id is on every answer, and the limit headers on every answer of a request that was counted (each success). */
function answerHeaders(variant: 'a' | 'b', routed: boolean, limited: boolean, required = true): Record<string, unknown> {
  const headers: Record<string, unknown> = { 'X-Request-Id': requestIdHeader(), ...(limited ? limitHeaders(required) : {}) };
  if (!routed) return headers;
  headers['X-Gateway-Provider'] = text('The provider that served the request.');
  if (variant === 'b') {
    headers['X-Gateway-Region'] = text('The region of that provider.');
    headers['X-Gateway-Strategy'] = text('The strategy applied.');
    headers['X-Gateway-Routing-Hops'] = int('Failover hops used.');
  }
  return headers;
}

/** What an error answer carries: the request id always, the limit headers once the limiter ran, and when to retry. */
function errorHeaders(limited: boolean): Record<string, unknown> {
  // The limit headers only once the limiter ran: not on a 401, a bad body or an unknown model.
  const { 'X-Request-Id': requestId, ...limits } = answerHeaders('a', false, limited, false);
  return {
    'X-Request-Id': requestId,
    'Retry-After': int('Seconds to wait before retrying: sent with 429, 409, 503 and a 402 that only requests in flight cause.'),
    'retry-after-ms': int('The same wait in milliseconds, exact where the gateway knows it (Retry-After is rounded up to whole seconds).'),
    'x-should-retry': {
      description: 'Whether a retry can succeed: false with 402 (budget used up) and 501; true with a 402 that only requests in flight cause.',
      schema: { type: 'string', enum: ['true', 'false'] },
    },
    ...limits,
  };
}

/** json ({text, usage}) and verbose_json (with task, language, duration, segments, and words when asked), as transcript-render.ts builds them. */
function transcriptJson(): Record<string, unknown> {
  const num = { type: 'number' };
  const timed = (name: string) => ({
    type: 'object',
    required: [name, 'start', 'end'],
    properties: { [name]: { type: 'string' }, start: num, end: num },
    additionalProperties: true,
  });
  const segment = timed('text') as { required: string[]; properties: Record<string, unknown> };
  // Whisper's segment fields, each always given (0 or [] where the provider tells none), as OpenAI's clients type them.
  const whisper = { seek: { type: 'integer' }, tokens: { type: 'array', items: { type: 'integer' } }, temperature: num, avg_logprob: num };
  Object.assign(segment.properties, { id: { type: 'integer' }, ...whisper, compression_ratio: num, no_speech_prob: num });
  segment.required.unshift('id');
  segment.required.push(...Object.keys(whisper), 'compression_ratio', 'no_speech_prob');
  return {
    type: 'object',
    required: ['text', 'usage'],
    properties: {
      text: { type: 'string' },
      usage: {
        description: 'Audio seconds billed (type duration), or tokens for an offer priced by tokens (type tokens).',
        anyOf: [
          { type: 'object', required: ['type', 'seconds'], properties: { type: { const: 'duration' }, seconds: num } },
          {
            type: 'object',
            required: ['type', 'input_tokens', 'output_tokens', 'total_tokens'],
            properties: { type: { const: 'tokens' }, input_tokens: { type: 'integer' }, output_tokens: { type: 'integer' }, total_tokens: { type: 'integer' } },
          },
        ],
      },
      task: { type: 'string', description: 'verbose_json: `transcribe`.' },
      language: { type: 'string', description: 'verbose_json: the language, named as OpenAI names it (`english`).' },
      duration: { ...num, description: 'verbose_json: seconds of audio.' },
      segments: { type: 'array', description: 'verbose_json.', items: segment },
      words: { type: 'array', description: 'verbose_json with timestamp_granularities word.', items: timed('word') },
    },
    additionalProperties: true,
  };
}

/**
 * A transcription's answer is built per `response_format` (json, verbose_json, text, srt, vtt), so its
 * route has no response schema for Fastify to serialise with; the document describes it here.
 */
const TRANSCRIPTION_ANSWER: Response = {
  description:
    'The transcript: JSON for json and verbose_json (with task, language, duration, segments and words on request), plain text for text and srt, WebVTT for vtt.',
  content: {
    'application/json': { schema: transcriptJson() },
    'text/plain': { schema: { type: 'string' } },
    'text/vtt': { schema: { type: 'string' } },
  },
};

/**
 * A chat stream. OpenAPI 3.1 has no schema for one event of a stream, so `x-event-schema` gives it (the
 * chunk, or the variant's error object that ends a failed stream) for clients to type each `data:` with.
 */
const eventStream = (variant: 'a' | 'b') => ({
  schema: {
    type: 'string',
    description:
      'With stream: true. Server-sent events: each `data:` a chat.completion.chunk object (the usage chunk, with empty choices, only with ' +
      'stream_options.include_usage), then `data: [DONE]`; a failure mid-stream is a `data:` error object. Each `data:` event other than ' +
      '[DONE] matches x-event-schema. Each event has an id `<request id>:<n>` to resume from with Last-Event-ID. Sent with ' +
      'X-Accel-Buffering: no and Cache-Control: no-cache.',
  },
  'x-event-schema': { anyOf: [structuredClone(ChatCompletionChunk), structuredClone(errorEnvelopeSchema(variant))] },
});

/** Sent on an event stream alone (SPEC.md), so that a reverse proxy passes each chunk on as it comes. */
const STREAM_BUFFERING = {
  description: '`no` on every event stream (stream: true), so that reverse proxies do not buffer its chunks; absent from a JSON answer.',
  required: false,
  schema: { type: 'string', enum: ['no'] },
};

/** Adds request and answer headers to the public API's operations (/v1, /v2 and their /alt mounts) in place, errors included. */
export function documentHeaders(doc: Document): Document {
  for (const [path, item] of Object.entries(doc.paths ?? {})) {
    // Cohere's v2 mount (/v2/rerank, /alt/v2/rerank) is the same public API, routed and limited alike.
    const variant = /^\/alt\/v[12]\//.test(path) ? 'b' : /^\/v[12]\//.test(path) ? 'a' : null;
    if (!variant || !item) continue;
    const routed = ROUTED.some((suffix) => path.endsWith(suffix));
    for (const [method, op] of Object.entries(item)) {
      if (!op || typeof op !== 'object' || !op.responses) continue;
      const extra: unknown[] = [];
      if (routed) extra.push(...routingParams(variant));
      if (method === 'post') extra.push(IDEMPOTENCY);
      if (path.endsWith('/chat/completions')) extra.push(LAST_EVENT_ID);
      if (extra.length > 0) op.parameters = [...(op.parameters ?? []), ...extra];
      // The models list is not counted against the limit (SPEC.md), so it carries no limit headers.
      const limited = !/\/models(\/|$)/.test(path);
      if (path.endsWith('/audio/transcriptions')) op.responses['200'] ??= structuredClone(TRANSCRIPTION_ANSWER);
      const ok = op.responses['200'];
      if (ok) ok.headers = { ...(ok.headers ?? {}), ...answerHeaders(variant, routed, limited) };
      if (ok && routed && method === 'post') ok.headers = { ...ok.headers, 'Idempotent-Replayed': replayedHeader() };
      if (ok?.content && path.endsWith('/chat/completions')) {
        ok.content['text/event-stream'] = eventStream(variant);
        ok.headers = { ...ok.headers, 'X-Accel-Buffering': STREAM_BUFFERING };
      }
      for (const range of ['4XX', '5XX'] as const) {
        const failed = op.responses[range];
        if (!failed) continue;
        failed.description =
          range === '4XX'
            ? `A refused request, in variant ${variant.toUpperCase()}'s error envelope.`
            : `A failure, in variant ${variant.toUpperCase()}'s error envelope.`;
        failed.headers = { ...(failed.headers ?? {}), ...errorHeaders(limited) };
      }
    }
  }
  return doc;
}
