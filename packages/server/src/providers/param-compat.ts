import type { Vendor } from '../config/vendor.js';

/**
 * Which chat request fields each provider refuses (PROVIDERS.md 2, its ✗ cells only; `?` cells pass as sent).
 * A field that does not change the answer is left out of the body for a provider that refuses it; one that does
 * is never dropped: routing skips the offers whose provider refuses it (routing/param-routing.ts).
 */

/** Fields that change the answer, each with whether a value asks for something (a neutral value counts as absent). */
const ANSWER_FIELDS = {
  n: { asks: (v: unknown) => typeof v === 'number' && v > 1, says: "'n' greater than 1" },
  logit_bias: { asks: (v: unknown) => hasKeys(v), says: "'logit_bias'" },
  logprobs: { asks: (v: unknown) => v === true, says: "'logprobs'" },
  top_logprobs: { asks: (v: unknown) => typeof v === 'number' && v > 0, says: "'top_logprobs'" },
  frequency_penalty: { asks: (v: unknown) => typeof v === 'number' && v !== 0, says: "'frequency_penalty' other than 0" },
  presence_penalty: { asks: (v: unknown) => typeof v === 'number' && v !== 0, says: "'presence_penalty' other than 0" },
  // `true` is the default (any number of calls in one turn); `false` asks for at most one.
  parallel_tool_calls: { asks: (v: unknown) => v === false, says: "'parallel_tool_calls' false" },
  // `["text"]` is what every chat answers; audio output asks for something.
  modalities: { asks: (v: unknown) => Array.isArray(v) && v.some((m) => m !== 'text'), says: "'modalities' other than text" },
  audio: { asks: (v: unknown) => hasKeys(v), says: "'audio'" },
  // OpenAI's reaches 2, Mistral's stops at 1.5 (a 422 above it): a hotter one is a different answer, not a neutral value.
  temperature: { asks: (v: unknown) => typeof v === 'number' && v > 1.5, says: "'temperature' above 1.5" },
} as const;

/**
 * Shapes of a conversation a provider refuses where another host of the same model serves them, and no translation
 * is exact: routed around as an answer field is. Each is told by a lookup or two, never a walk of the messages.
 */
const SHAPES = {
  // Mistral: 400 "Expected last role User or Tool (or Assistant with prefix True) for serving but got system"
  // (PROVIDERS.md 3.3); OpenAI's API and vLLM hosts take it. Moving the message or giving it another role would change
  // what the model reads, so there is no exact translation (a last assistant message has one: `prefix`).
  last_system: { says: "a conversation whose last message is 'system' or 'developer'", param: 'messages' },
  // Mistral: 400 "Unexpected role 'user' after role 'tool'" (code 3230, type invalid_request_message_order); OpenAI's API
  // and vLLM hosts take a user (or system) message right after a tool result. Told by the walk the chat route already
  // makes of the messages, and only preferred: a provider's own refusal stays the client's 400 where none takes it.
  after_tool: { says: "a 'user' or 'system' message right after a 'tool' message", param: 'messages' },
} as const;

type Shape = keyof typeof SHAPES;
/** What a request asks that a provider may refuse: an answer field, or a shape of its conversation. */
export type AnswerField = keyof typeof ANSWER_FIELDS | Shape;
const ANSWER_FIELD_NAMES = Object.keys(ANSWER_FIELDS) as (keyof typeof ANSWER_FIELDS)[];

interface Refusals {
  /** Fields that do not change the answer: left out. */
  drop: readonly string[];
  /** Fields that change the answer: routed around when used, left out when neutral. */
  refuse: readonly AnswerField[];
}

const TABLE: Partial<Record<Vendor, Refusals>> = {
  // Its adapter sends only Mistral's own keys, so `user` and `store` never reach it (and nothing here is stripped for it:
  // a temperature up to 1.5 is sent as asked).
  mistral: { drop: ['user', 'store'], refuse: ['logprobs', 'top_logprobs', 'logit_bias', 'temperature', 'last_system', 'after_tool'] },
  scaleway: { drop: ['user'], refuse: ['n', 'frequency_penalty', 'top_logprobs', 'logit_bias'] },
  // Cohere's compatibility API (chat is not routed to a `cohere`-type entry, an `openai`-type one at its host is); the
  // fields it does not list but takes under another name or not at all are its adapter's (openai-compatible/cohere-compat.ts).
  cohere: {
    drop: ['store', 'metadata', 'service_tier', 'prediction'],
    refuse: ['n', 'top_logprobs', 'logit_bias', 'parallel_tool_calls', 'modalities', 'audio'],
  },
};

const NONE: readonly string[] = [];

/** The keys to leave out of the body sent to `vendor`: what it refuses, answer fields included (only neutral ones get there). */
export function strippedKeys(vendor: Vendor): readonly string[] {
  const r = TABLE[vendor];
  return r ? [...r.drop, ...r.refuse.filter((f) => !(f in SHAPES))] : NONE;
}

/** The answer fields and shapes a request asks for; null (no allocation) for the usual request that uses none of them. */
export function answerFieldsUsed(body: Record<string, unknown>): AnswerField[] | null {
  let used: AnswerField[] | null = null;
  for (const field of ANSWER_FIELD_NAMES) {
    const v = body[field];
    if (v === undefined || v === null || !ANSWER_FIELDS[field].asks(v)) continue;
    if (used === null) used = [field];
    else used.push(field);
  }
  const messages = body['messages'];
  const role = Array.isArray(messages) ? (messages[messages.length - 1] as { role?: unknown } | null)?.role : undefined;
  if (role === 'system' || role === 'developer') {
    if (used === null) used = ['last_system'];
    else used.push('last_system');
  }
  return used;
}

/** The first of `used` that `vendor` refuses, or null. */
export function refusedField(vendor: Vendor, used: readonly AnswerField[]): AnswerField | null {
  const refuse = TABLE[vendor]?.refuse;
  if (!refuse) return null;
  for (const field of used) if (refuse.includes(field)) return field;
  return null;
}

/** How an error message names a field as the request used it ("'n' greater than 1"). */
export function describeField(field: AnswerField): string {
  return field in SHAPES ? SHAPES[field as Shape].says : ANSWER_FIELDS[field as keyof typeof ANSWER_FIELDS].says;
}

/** The request parameter a refusal names: the field, or `messages` for a shape of the conversation. */
export function fieldParam(field: AnswerField): string {
  return field in SHAPES ? SHAPES[field as Shape].param : field;
}

/**
 * Whether an embeddings provider gives vectors of the size `dimensions` asks: `yes`; `maybe` where it ignores the
 * field and answers the model's own size, which serves a request asking that size only; `no` where it refuses it.
 */
export type DimensionsSupport = 'yes' | 'maybe' | 'no';

/**
 * OpenAI-compatible hosts whose embeddings do not take `dimensions` (PROVIDERS.md 5, 10.3): Scaleway lists it as
 * unsupported and ignores it, Cohere's compatibility API refuses it. The others pass it on.
 */
const EMBEDDINGS_DIMENSIONS: Partial<Record<Vendor, DimensionsSupport>> = { scaleway: 'maybe', cohere: 'no' };

/** How an OpenAI-compatible host's embeddings take `dimensions`, before it was seen answering. */
export function dimensionsSupport(vendor: Vendor): DimensionsSupport {
  return EMBEDDINGS_DIMENSIONS[vendor] ?? 'yes';
}

function hasKeys(v: unknown): boolean {
  if (typeof v !== 'object' || v === null) return false;
  for (const _ in v) return true;
  return false;
}
