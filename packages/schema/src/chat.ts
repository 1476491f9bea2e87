import { type Static, type TSchema, Type } from '@sinclair/typebox';
import { OPENAI_NAME, TOKEN_ID } from './patterns.js';

// `function`: the result of a call in OpenAI's deprecated functions API, which its API still takes.
const Role = Type.Union(['system', 'developer', 'user', 'assistant', 'tool', 'function'].map((r) => Type.Literal(r)));

/**
 * An `input_audio` part's format: OpenAI's `wav` and `mp3`, and the containers the hosts reading audio in a chat decode
 * besides (Gemini on Vertex, vLLM's Voxtral), named as a transcription's file is (flac, m4a, ogg, webm, ...).
 */
const AUDIO_FORMATS = ['wav', 'mp3', 'flac', 'm4a', 'mp4', 'mpeg', 'mpga', 'oga', 'ogg', 'webm'];

/** A content part's own field, by its type, as OpenAI's API requires it (Mistral's for its own types and shapes). */
const PART_FIELDS = {
  text: { text: { type: 'string' } },
  // Mistral's API also takes the URL as a string.
  // `detail` as OpenAI's API takes it (its SDK's `original` too); Mistral's and vLLM's read the same words.
  image_url: {
    image_url: {
      anyOf: [
        { type: 'string' },
        { type: 'object', required: ['url'], properties: { url: { type: 'string' }, detail: { enum: ['auto', 'low', 'high', 'original'] } } },
      ],
    },
  },
  // Mistral's API also takes the audio (base64 or a URL) as a string.
  input_audio: {
    input_audio: {
      anyOf: [{ type: 'string' }, { type: 'object', required: ['data', 'format'], properties: { data: { type: 'string' }, format: { enum: AUDIO_FORMATS } } }],
    },
  },
  // A file is sent inline or by an uploaded file's id: one without either says nothing a provider could read.
  file: {
    file: {
      type: 'object',
      properties: { file_data: { type: 'string' }, file_id: { type: 'string' }, filename: { type: 'string' } },
      anyOf: [{ required: ['file_data'] }, { required: ['file_id'] }],
    },
  },
  // Mistral's document part: a URL or a data URL.
  document_url: { document_url: { type: 'string' } },
  refusal: { refusal: { type: 'string' } },
  // Mistral's reasoning, in an assistant message replayed from its answer (text parts, or a string): never sent on.
  thinking: { thinking: { anyOf: [{ type: 'string' }, { type: 'array' }] } },
} as const;

type PartType = keyof typeof PART_FIELDS;

/**
 * A content part of a message of a role that takes `types`: another type is refused naming `content.N.type` with the
 * types taken, and a part without its own field (`image_url`, `text`), or with one of another shape, naming that
 * field, as OpenAI's API refuses them, rather than passed to a provider that may take it or refuse it in its own words.
 */
function partOf(types: PartType[]) {
  return {
    type: 'object',
    required: ['type'],
    properties: { type: { enum: types } },
    allOf: types.map((t) => ({
      if: { required: ['type'], properties: { type: { const: t } } },
      // biome-ignore lint/suspicious/noThenProperty: JSON Schema's if/then, not a promise.
      then: { required: Object.keys(PART_FIELDS[t]), properties: PART_FIELDS[t] },
    })),
  };
}

/** Each role's content parts, as OpenAI's API takes them, with Mistral's own (a document, an assistant's reasoning). */
const PARTS_BY_ROLE: [string[], PartType[]][] = [
  [['user'], ['text', 'image_url', 'input_audio', 'file', 'document_url']],
  [['assistant'], ['text', 'refusal', 'thinking']],
  // A `function` result is sent as a tool's (legacy-functions.ts).
  [['system', 'developer', 'tool', 'function'], ['text']],
];

/** A message with content: a string or parts (not null). */
const SAYS_SOMETHING = { required: ['content'], properties: { content: { anyOf: [{ type: 'string' }, { type: 'array' }] } } };

/** OpenAI's message object; fields beyond role and content pass through to the provider. */
export const ChatMessage = Type.Object(
  {
    role: Role,
    content: Type.Optional(Type.Union([Type.String(), Type.Array(Type.Object({}, { additionalProperties: true })), Type.Null()])),
    name: Type.Optional(Type.String()),
    tool_call_id: Type.Optional(Type.String()),
    // Null as well: a message read back from an answer (Python's `message.model_dump()`, LiteLLM) says `tool_calls: null`.
    tool_calls: Type.Optional(Type.Union([Type.Array(Type.Object({}, { additionalProperties: true })), Type.Null()])),
  },
  {
    additionalProperties: true,
    // As OpenAI's API has it: only an assistant's message may leave out its content, and then it carries tool calls.
    // Each `if` requires the role: a message without one matched every role's `if` vacuously, and its error named a
    // field of another role (`messages.0.name`) rather than the missing `role`.
    allOf: [
      {
        if: { required: ['role'], properties: { role: { enum: ['system', 'developer', 'user', 'tool'] } } },
        // biome-ignore lint/suspicious/noThenProperty: JSON Schema's if/then, not a promise.
        then: SAYS_SOMETHING,
      },
      {
        if: { required: ['role'], properties: { role: { const: 'assistant' } } },
        // biome-ignore lint/suspicious/noThenProperty: JSON Schema's if/then, not a promise.
        then: {
          anyOf: [
            SAYS_SOMETHING,
            { required: ['tool_calls'], properties: { tool_calls: { type: 'array', minItems: 1 } } },
            // OpenAI's deprecated functions API: content may be left out beside a function_call too.
            { required: ['function_call'], properties: { function_call: { type: 'object' } } },
          ],
        },
      },
      {
        // As OpenAI's API has it: a function's result names the function, and its content may be null.
        if: { required: ['role'], properties: { role: { const: 'function' } } },
        // biome-ignore lint/suspicious/noThenProperty: JSON Schema's if/then, not a promise.
        then: { required: ['name', 'content'] },
      },
      // Parts where content is an array of them (said with its type, as Ajv's strict mode wants `items` to be).
      ...PARTS_BY_ROLE.map(([roles, types]) => ({
        if: { required: ['role'], properties: { role: { enum: roles } } },
        // biome-ignore lint/suspicious/noThenProperty: JSON Schema's if/then, not a promise.
        then: { properties: { content: { anyOf: [{ type: 'array', items: partOf(types) }, { not: { type: 'array' } }] } } },
      })),
    ],
  },
);

const FunctionDefinition = Type.Object(
  {
    // Checked here, as OpenAI does: a provider would refuse it after the budget hold, or a lenient one answer with it.
    name: Type.String({ pattern: OPENAI_NAME }),
    description: Type.Optional(Type.String()),
    parameters: Type.Optional(Type.Object({}, { additionalProperties: true })),
    strict: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: true },
);

type ChatToolValue = { type: 'function'; function: Static<typeof FunctionDefinition> };

/**
 * A function tool, the only kind the providers behind this gateway take. Its `type` is checked before its `function`
 * is required: a tool of another type (OpenAI's `custom`) is refused naming `tools.N.type`, not a missing function.
 */
export const ChatTool = Type.Unsafe<ChatToolValue>({
  type: 'object',
  required: ['type'],
  properties: { type: { const: 'function' }, function: FunctionDefinition },
  allOf: [
    {
      if: { required: ['type'], properties: { type: { const: 'function' } } },
      // biome-ignore lint/suspicious/noThenProperty: JSON Schema's if/then, not a promise.
      then: { required: ['function'] },
    },
  ],
});

const JsonSchemaFormat = Type.Object(
  {
    // As a tool's name: a strict provider would refuse another after the budget hold, a lenient one answer it.
    name: Type.String({ pattern: OPENAI_NAME }),
    schema: Type.Optional(Type.Object({}, { additionalProperties: true })),
    strict: Type.Optional(Type.Boolean()),
    description: Type.Optional(Type.String()),
  },
  { additionalProperties: true },
);

type ResponseFormatValue = { type: 'text' } | { type: 'json_object' } | { type: 'json_schema'; json_schema: Static<typeof JsonSchemaFormat> };

/**
 * `type` picks the shape (text, a JSON object, or a JSON Schema with its `json_schema`). Written as a tag and an
 * if/then rather than a union of three shapes, so that a refusal names what is wrong in the shape the tag chose
 * (`response_format.json_schema.strict`), not the tag that the other two shapes did not have.
 */
export const ResponseFormat = Type.Unsafe<ResponseFormatValue>({
  type: 'object',
  required: ['type'],
  properties: { type: { enum: ['text', 'json_object', 'json_schema'] }, json_schema: JsonSchemaFormat },
  allOf: [
    {
      if: { required: ['type'], properties: { type: { const: 'json_schema' } } },
      // biome-ignore lint/suspicious/noThenProperty: JSON Schema's if/then, not a promise.
      then: { required: ['json_schema'] },
    },
  ],
});

/** `reasoning_effort` values OpenAI's API takes. */
export const REASONING_EFFORTS = ['none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max'] as const;

/** `service_tier` values OpenAI's API takes. */
export const SERVICE_TIERS = ['auto', 'default', 'flex', 'scale', 'priority', 'fast'] as const;

/**
 * A field OpenAI's API takes as null, meaning "not given" (its SDKs type these `number | null`; Python's sends None as
 * null): accepted here, and dropped before anything reads the body (routes/chat-completions.ts).
 */
export function Nullable<T extends TSchema>(schema: T) {
  return Type.Union([schema, Type.Null()]);
}

/**
 * The request's optional fields, each taken as null meaning "not given": those of {@link ChatCompletionRequest} that
 * {@link Nullable} lets be null, and those passed through as sent. OpenAI's API description marks most of them nullable;
 * `tools` and `response_format` come as null from clients (LangChain, LiteLLM, Python's None) that OpenAI answers; the
 * few it does not mark (`parallel_tool_calls`, `user`, `web_search_options`) are dropped too rather than sent to a
 * provider that may refuse a null, so that no request's fate depends on where it is routed.
 */
export const NULLABLE_CHAT_FIELDS = [
  'stream',
  'stream_options',
  'temperature',
  'max_tokens',
  'max_completion_tokens',
  'top_p',
  'seed',
  'n',
  'reasoning_effort',
  'tools',
  'tool_choice',
  'response_format',
  'stop',
  'logit_bias',
  'logprobs',
  'top_logprobs',
  'presence_penalty',
  'frequency_penalty',
  'user',
  'metadata',
  'store',
  'service_tier',
  'parallel_tool_calls',
  'modalities',
  'prediction',
  'audio',
  'web_search_options',
  'functions',
  'function_call',
  'verbosity',
  'safety_identifier',
  'prompt_cache_key',
  'prompt_cache_retention',
] as const;

export const ChatCompletionRequest = Type.Object(
  {
    model: Type.String({ minLength: 1, maxLength: 200 }),
    messages: Type.Array(ChatMessage, { minItems: 1 }),
    stream: Type.Optional(Nullable(Type.Boolean({ default: false }))),
    stream_options: Type.Optional(
      Type.Union([Type.Object({ include_usage: Type.Optional(Type.Boolean()) }, { additionalProperties: true }), Type.Null()], {
        description: 'Only with `stream: true` (400 `stream_options` otherwise, as OpenAI answers).',
      }),
    ),
    temperature: Type.Optional(Nullable(Type.Number({ minimum: 0, maximum: 2, default: 1 }))),
    max_tokens: Type.Optional(Nullable(Type.Integer({ minimum: 1 }))),
    // OpenAI's newer name for the same cap; taken as max_tokens where max_tokens is not given.
    max_completion_tokens: Type.Optional(Nullable(Type.Integer({ minimum: 1 }))),
    top_p: Type.Optional(Nullable(Type.Number({ minimum: 0, maximum: 1, default: 1 }))),
    tools: Type.Optional(Nullable(Type.Array(ChatTool))),
    tool_choice: Type.Optional(
      Type.Union(
        [
          Type.Union(['none', 'auto', 'required'].map((c) => Type.Literal(c))),
          Type.Object({ type: Type.Literal('function'), function: Type.Object({ name: Type.String() }) }, { additionalProperties: true }),
          Type.Null(),
        ],
        {
          description:
            '`required` or a named function needs `tools`, and a named function must be one of them (400 `tool_choice` or `tool_choice.function.name` otherwise, as OpenAI answers).',
        },
      ),
    ),
    response_format: Type.Optional(Nullable(ResponseFormat)),
    // OpenAI's int64. Its ends as a client sends them (-2^63, 2^63 - 1) are read from JSON as doubles written back as
    // ±9223372036854776000, past int64: taken, and sent on as the nearest double within it (routes/chat-completions.ts).
    seed: Type.Optional(Nullable(Type.Integer({ minimum: -(2 ** 63), maximum: 2 ** 63 }))),
    // OpenAI's bounds: a count outside them is refused here, not passed to a provider that may ignore it.
    n: Type.Optional(Nullable(Type.Integer({ minimum: 1, maximum: 128 }))),
    // OpenAI's values (its SDK's ReasoningEffort): `none` turns thinking off where a provider can (Mistral, Cohere);
    // adapters map them onto what each provider knows (docs/adapters.md).
    reasoning_effort: Type.Optional(Nullable(Type.Union(REASONING_EFFORTS.map((e) => Type.Literal(e))))),
    // OpenAI's values (its SDK's ChatCompletionCreateParams): another is refused here, as OpenAI refuses it, rather
    // than taken by one provider and refused by another in its own words.
    service_tier: Type.Optional(Nullable(Type.Union(SERVICE_TIERS.map((t) => Type.Literal(t))))),
    verbosity: Type.Optional(Nullable(Type.Union(['low', 'medium', 'high'].map((v) => Type.Literal(v))))),
    // Checked in routes/chat-completions.ts, as top_logprobs is.
    parallel_tool_calls: Type.Optional(
      Type.Union([Type.Boolean(), Type.Null()], { description: 'Only with `tools` (400 `parallel_tool_calls` otherwise, as OpenAI answers).' }),
    ),
    // Up to 4 sequences, as OpenAI's API takes them: a provider may take more, or refuse them in its own words.
    stop: Type.Optional(Nullable(Type.Union([Type.String(), Type.Array(Type.String(), { maxItems: 4 })]))),
    // OpenAI's ranges, refused here as it refuses them: a provider may take a value outside them, or refuse it in its own
    // words (Azure's 400 names no parameter).
    presence_penalty: Type.Optional(Nullable(Type.Number({ minimum: -2, maximum: 2 }))),
    frequency_penalty: Type.Optional(Nullable(Type.Number({ minimum: -2, maximum: 2 }))),
    logprobs: Type.Optional(Nullable(Type.Boolean())),
    top_logprobs: Type.Optional(
      Type.Union([Type.Integer({ minimum: 0, maximum: 20 }), Type.Null()], {
        description: 'Above 0 only with `logprobs: true` (400 `top_logprobs` otherwise, as OpenAI answers); 0 asks for nothing and is not sent.',
      }),
    ),
    // Token ids of the model's tokenizer, each with a bias from -100 (banned) to 100 (exclusive).
    logit_bias: Type.Optional(
      Nullable(
        Type.Unsafe<Record<string, number>>({
          type: 'object',
          propertyNames: { pattern: TOKEN_ID },
          additionalProperties: { type: 'number', minimum: -100, maximum: 100 },
        }),
      ),
    ),
  },
  { additionalProperties: true },
);
export type ChatCompletionRequest = Static<typeof ChatCompletionRequest>;

// The details a host reports (vLLM's and Azure's `cached_tokens`, `reasoning_tokens`), null where it has none.
const UsageDetails = (field: string) => Type.Optional(Nullable(Type.Object({ [field]: Type.Optional(Type.Integer()) }, { additionalProperties: true })));
const Usage = Type.Object(
  {
    prompt_tokens: Type.Integer(),
    completion_tokens: Type.Integer(),
    total_tokens: Type.Integer(),
    prompt_tokens_details: UsageDetails('cached_tokens'),
    completion_tokens_details: UsageDetails('reasoning_tokens'),
  },
  { additionalProperties: true },
);

/** A token's log probability, as OpenAI's `choices[].logprobs.content[]` gives it (`logprobs: true`). */
const TokenLogprob = Type.Object(
  {
    token: Type.String(),
    logprob: Type.Number(),
    bytes: Type.Optional(Nullable(Type.Array(Type.Integer()))),
    top_logprobs: Type.Optional(
      Type.Array(
        Type.Object(
          { token: Type.String(), logprob: Type.Number(), bytes: Type.Optional(Nullable(Type.Array(Type.Integer()))) },
          { additionalProperties: true },
        ),
      ),
    ),
  },
  { additionalProperties: true },
);
// A choice's `logprobs`: null unless the request asked for them.
const ChoiceLogprobs = Type.Optional(
  Nullable(
    Type.Object({ content: Nullable(Type.Array(TokenLogprob)), refusal: Type.Optional(Nullable(Type.Array(TokenLogprob))) }, { additionalProperties: true }),
  ),
);

/** The reasoning of a reasoning model, under this one name whichever the host uses (`reasoning`, `<think>`, Mistral's thinking parts). */
const Reasoning = Type.Optional(Nullable(Type.String({ description: "A reasoning model's reasoning, apart from its answer." })));

/** A tool call of an answer: its `type` always given (Mistral leaves it out), its arguments always a JSON string. */
const ToolCall = Type.Object(
  {
    id: Type.String(),
    type: Type.Literal('function'),
    function: Type.Object({ name: Type.String(), arguments: Type.String() }, { additionalProperties: true }),
  },
  { additionalProperties: true },
);

/** A part of a tool call in a stream: its `index` always, its id, type and name with its first part, its arguments in pieces. */
const ToolCallDelta = Type.Object(
  {
    index: Type.Integer(),
    id: Type.Optional(Type.String()),
    type: Type.Optional(Type.Literal('function')),
    function: Type.Optional(Type.Object({ name: Type.Optional(Type.String()), arguments: Type.Optional(Type.String()) }, { additionalProperties: true })),
  },
  { additionalProperties: true },
);

// OpenAI's deprecated functions API, answered as asked (a request with `functions`): the call as `function_call`.
const FunctionCall = Type.Object({ name: Type.String(), arguments: Type.String() }, { additionalProperties: true });
const FunctionCallDelta = Type.Object({ name: Type.Optional(Type.String()), arguments: Type.Optional(Type.String()) }, { additionalProperties: true });

const SystemFingerprint = Type.Optional(Nullable(Type.String()));

export const ChatCompletionResponse = Type.Object(
  {
    id: Type.String(),
    object: Type.Literal('chat.completion'),
    created: Type.Integer(),
    model: Type.String(),
    choices: Type.Array(
      Type.Object(
        {
          index: Type.Integer(),
          finish_reason: Type.Union([Type.String(), Type.Null()]),
          message: Type.Object(
            {
              role: Type.String(),
              content: Type.Union([Type.String(), Type.Null()]),
              refusal: Type.Optional(Nullable(Type.String())),
              reasoning_content: Reasoning,
              tool_calls: Type.Optional(Type.Array(ToolCall)),
              function_call: Type.Optional(FunctionCall),
            },
            { additionalProperties: true },
          ),
          logprobs: ChoiceLogprobs,
        },
        { additionalProperties: true },
      ),
    ),
    usage: Type.Optional(Usage),
    system_fingerprint: SystemFingerprint,
  },
  { additionalProperties: true },
);

/**
 * One `data:` event of a chat stream (the OpenAPI description's `x-event-schema`): a choice's delta
 * (`content`, `reasoning_content`, `tool_calls`), or, with stream_options.include_usage, the usage chunk
 * with empty choices.
 */
export const ChatCompletionChunk = Type.Object(
  {
    id: Type.String(),
    object: Type.Literal('chat.completion.chunk'),
    created: Type.Integer(),
    model: Type.String(),
    choices: Type.Array(
      Type.Object(
        {
          index: Type.Integer(),
          finish_reason: Type.Union([Type.String(), Type.Null()]),
          delta: Type.Object(
            {
              role: Type.Optional(Type.String()),
              content: Type.Optional(Type.Union([Type.String(), Type.Null()])),
              refusal: Type.Optional(Nullable(Type.String())),
              reasoning_content: Reasoning,
              tool_calls: Type.Optional(Type.Array(ToolCallDelta)),
              function_call: Type.Optional(FunctionCallDelta),
            },
            { additionalProperties: true },
          ),
          logprobs: ChoiceLogprobs,
        },
        { additionalProperties: true },
      ),
    ),
    usage: Type.Optional(Type.Union([Usage, Type.Null()])),
    system_fingerprint: SystemFingerprint,
  },
  { additionalProperties: true, title: 'ChatCompletionChunk' },
);
