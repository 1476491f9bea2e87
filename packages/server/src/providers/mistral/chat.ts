import { createHash } from 'node:crypto';
import type { JsonResponse } from '../http-client.js';
import { mapFinishReason, mapToolCalls, saysNothing, withChoices, withoutThinking } from '../openai-shape.js';
import { providerUsage } from '../provider-usage.js';
import type { ChatBody, ChatCompletion, TokenUsage } from '../types.js';
import { mistralError } from './errors.js';

/** Mistral's chat schema forbids unknown keys (422 `extra_forbidden`): only these are sent. */
const CHAT_KEYS = [
  'temperature',
  'top_p',
  'max_tokens',
  'stop',
  'random_seed',
  'response_format',
  'tools',
  'tool_choice',
  'presence_penalty',
  'frequency_penalty',
  'n',
  'prediction',
  'parallel_tool_calls',
  'prompt_mode',
  'safe_prompt',
  'metadata',
  'guardrails',
  'prompt_cache_key',
] as const;

const MESSAGE_KEYS: Record<string, readonly string[]> = {
  system: ['role', 'content'],
  user: ['role', 'content'],
  assistant: ['role', 'content', 'tool_calls', 'prefix'],
  tool: ['role', 'content', 'tool_call_id', 'name'],
};

/**
 * The client's OpenAI body as Mistral accepts it: allow-listed keys,
 * `seed` → `random_seed`, `max_completion_tokens` → `max_tokens`, any
 * `reasoning_effort` → `high` (Mistral only knows on and off), no
 * `stream_options` (usage always comes on the last chunk), messages
 * cleaned and tool-call ids made Mistral's 9 alphanumerics.
 */
export function toMistralChatBody(body: ChatBody, upstreamModel: string, stream: boolean): Record<string, unknown> {
  const out: Record<string, unknown> = { model: upstreamModel, messages: toMistralMessages(body.messages), stream };
  for (const key of CHAT_KEYS) if (body[key] !== undefined) out[key] = body[key];
  if (Array.isArray(out['tools'])) out['tools'] = toMistralTools(out['tools']);
  if (schemaless(out['response_format'])) out['response_format'] = { type: 'json_object' };
  if (out['random_seed'] === undefined && body['seed'] !== undefined) out['random_seed'] = body['seed'];
  // OpenAI's current cap wins over its deprecated one, as on the vLLM hosts that serve the same models: with both
  // given, the answer is cut alike wherever it is routed.
  if (body['max_completion_tokens'] !== undefined) out['max_tokens'] = body['max_completion_tokens'];
  if (typeof body['reasoning_effort'] === 'string') out['reasoning_effort'] = body['reasoning_effort'] === 'none' ? 'none' : 'high';
  return out;
}

/**
 * A `json_schema` format with no schema: OpenAI takes it (its `schema` is optional) as JSON of any shape, where
 * Mistral's `JsonSchema` requires one (422). Its `json_object` says the same.
 */
function schemaless(format: unknown): boolean {
  const f = format as { type?: unknown; json_schema?: { schema?: unknown } | null } | null | undefined;
  return f?.type === 'json_schema' && (f.json_schema?.schema === undefined || f.json_schema.schema === null);
}

/** Mistral refuses tool-call ids other than `[a-zA-Z0-9]{9}`: others are mapped by a hash, the same in the call and its result. */
export function mistralToolId(id: string): string {
  if (/^[a-zA-Z0-9]{9}$/.test(id)) return id;
  const digest = createHash('sha256').update(id).digest();
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
  return Array.from(digest.subarray(0, 9), (b) => alphabet[b % alphabet.length]).join('');
}

/**
 * The conversation as Mistral serves it, where OpenAI takes it as it is: an assistant message with neither content
 * nor tool calls (one whose only content was reasoning, stripped above) says nothing and is left out, as Mistral
 * refuses it; a conversation that still ends with an assistant message is marked `prefix`, so the model continues it
 * (Mistral refuses a last assistant message otherwise). One with tool calls stays as it is: its results are missing.
 */
function toMistralMessages(messages: unknown[]): unknown[] {
  const out: unknown[] = [];
  for (const message of messages) {
    const m = toMistralMessage(message);
    if (!isEmptyAssistant(m)) out.push(m);
  }
  const last = out.at(-1) as Record<string, unknown> | undefined;
  if (last?.['role'] === 'assistant' && !hasToolCalls(last)) out[out.length - 1] = { ...last, prefix: true };
  return out;
}

/** The same test the chat route's walk makes (saysNothing), so that its routing sees the conversation Mistral gets. */
function isEmptyAssistant(message: unknown): boolean {
  if (!message || typeof message !== 'object') return false;
  const m = message as Record<string, unknown>;
  return m['role'] === 'assistant' && saysNothing(m);
}

function hasToolCalls(m: Record<string, unknown>): boolean {
  return Array.isArray(m['tool_calls']) && m['tool_calls'].length > 0;
}

function toMistralMessage(message: unknown): unknown {
  if (!message || typeof message !== 'object') return message;
  const m = message as Record<string, unknown>;
  const role = m['role'] === 'developer' ? 'system' : String(m['role']);
  const out: Record<string, unknown> = {};
  for (const key of MESSAGE_KEYS[role] ?? ['role', 'content']) if (m[key] !== undefined) out[key] = m[key];
  out['role'] = role;
  if (role === 'assistant' && Array.isArray(out['content'])) out['content'] = withoutThinking(out['content']);
  if (Array.isArray(out['content'])) out['content'] = toMistralChunks(out['content']);
  if (role === 'assistant' && Array.isArray(out['tool_calls'])) out['tool_calls'] = out['tool_calls'].map(toMistralToolCall);
  if (role === 'tool' && typeof out['tool_call_id'] === 'string') out['tool_call_id'] = mistralToolId(out['tool_call_id']);
  return out;
}

/**
 * Content parts as Mistral's chunks, where OpenAI's differ (a 422 otherwise): `input_audio` is the base64 string alone
 * (Mistral reads the format from the bytes, OpenAI's `{data, format}` is refused), a file by its id is `{type: 'file',
 * file_id}` (OpenAI nests it under `file`), and an assistant's `refusal` part, which Mistral's chunks lack, is the text
 * the model said. A file's inline `file_data` has no Mistral chunk and goes as it came (Mistral's 422, the client's).
 * The same array when no part differs (no copy).
 */
function toMistralChunks(parts: unknown[]): unknown[] {
  if (!parts.some(differs)) return parts;
  return parts.map((part) => {
    if (!differs(part)) return part;
    const p = part as Record<string, unknown>;
    if (p['type'] === 'refusal') return { type: 'text', text: String(p['refusal'] ?? '') };
    if (p['type'] === 'file') return { type: 'file', file_id: (p['file'] as { file_id: unknown }).file_id };
    return { type: 'input_audio', input_audio: (p['input_audio'] as { data?: unknown }).data };
  });
}

function differs(part: unknown): boolean {
  const p = part as { type?: unknown; input_audio?: unknown; file?: { file_id?: unknown } } | null;
  if (p?.type === 'refusal') return true;
  if (p?.type === 'file') return typeof p.file?.file_id === 'string';
  return p?.type === 'input_audio' && typeof p.input_audio === 'object' && p.input_audio !== null;
}

/**
 * A call of the history with Mistral's keys alone: its schema forbids others (422), and OpenAI's SDK adds some to the
 * message it answers, which clients send back as it is (`parse()` puts `parsed_arguments` in each call's function).
 */
function toMistralToolCall(call: unknown): unknown {
  const c = (call ?? {}) as { id?: unknown; type?: unknown; function?: unknown };
  const f = c.function as { name?: unknown; arguments?: unknown } | null | undefined;
  const fn = f && typeof f === 'object' ? { name: f.name, arguments: f.arguments } : f;
  return { ...(typeof c.id === 'string' ? { id: mistralToolId(c.id) } : {}), type: c.type ?? 'function', function: fn };
}

/** Mistral's `Function` keys; its `parameters` are required where OpenAI's may be left out. */
const FUNCTION_KEYS = ['name', 'description', 'strict', 'parameters'] as const;

/**
 * Tools as Mistral's schema takes them: a function given without `parameters` (OpenAI's way of saying it takes
 * none) with an empty object schema, which says the same, and no key Mistral's schema lacks. The same array when
 * every tool already fits (no copy).
 */
function toMistralTools(tools: unknown[]): unknown[] {
  if (!tools.some(toolDiffers)) return tools;
  return tools.map((tool) => {
    if (!toolDiffers(tool)) return tool;
    const f = (tool as { function: Record<string, unknown> }).function;
    const fn: Record<string, unknown> = {};
    for (const key of FUNCTION_KEYS) if (f[key] !== undefined) fn[key] = f[key];
    fn['parameters'] ??= { type: 'object', properties: {} };
    return { type: (tool as { type?: unknown }).type ?? 'function', function: fn };
  });
}

function toolDiffers(tool: unknown): boolean {
  const t = tool as { function?: unknown } | null;
  if (!t || typeof t !== 'object' || !t.function || typeof t.function !== 'object') return false;
  for (const key in t) if (key !== 'type' && key !== 'function') return true;
  const f = t.function as Record<string, unknown>;
  if (f['parameters'] === undefined || f['parameters'] === null) return true;
  for (const key in f) if (!(FUNCTION_KEYS as readonly string[]).includes(key)) return true;
  return false;
}

/** Splits Mistral's content chunks: `thinking` text becomes `reasoning_content`, `text` the content. */
export function splitContent(content: unknown): { content: string | null; reasoning: string | null } {
  if (!Array.isArray(content)) return { content: typeof content === 'string' ? content : null, reasoning: null };
  let text = '';
  let thinking: string | null = null;
  for (const chunk of content) {
    const c = (chunk ?? {}) as { type?: unknown; text?: unknown; thinking?: unknown };
    if (c.type === 'text' && typeof c.text === 'string') text += c.text;
    if (c.type === 'thinking' && Array.isArray(c.thinking)) {
      thinking = (thinking ?? '') + c.thinking.map((t) => String((t as { text?: unknown } | null)?.text ?? '')).join('');
    }
    // The documented shape is a list of text chunks; a bare string is taken too rather than dropped.
    if (c.type === 'thinking' && typeof c.thinking === 'string') thinking = (thinking ?? '') + c.thinking;
  }
  return { content: text, reasoning: thinking };
}

/** Usage without Mistral's extra keys (`num_cached_tokens`, `prompt_audio_seconds`). */
export function cleanUsage(usage: unknown): TokenUsage | null {
  const u = providerUsage(usage);
  if (u === null) return null;
  const out: TokenUsage & Record<string, unknown> = {
    prompt_tokens: u.prompt_tokens,
    completion_tokens: u.completion_tokens,
    total_tokens: u.total_tokens,
  };
  if (u['prompt_tokens_details'] && typeof u['prompt_tokens_details'] === 'object') out['prompt_tokens_details'] = u['prompt_tokens_details'];
  return out;
}

export function parseMistralCompletion(provider: string, res: JsonResponse): ChatCompletion {
  if (res.status < 200 || res.status >= 300) throw mistralError(provider, res);
  const body = withChoices(provider, res.body);
  const usage = cleanUsage(body['usage']);
  return {
    id: typeof body['id'] === 'string' ? body['id'] : `chatcmpl-${Date.now()}`,
    object: 'chat.completion',
    created: typeof body['created'] === 'number' ? body['created'] : Math.floor(Date.now() / 1000),
    model: String(body['model'] ?? ''),
    choices: body['choices'].map((choice) => mapChoice(provider, choice)),
    ...(usage ? { usage } : {}),
  };
}

function mapChoice(provider: string, choice: unknown): unknown {
  const c = (choice ?? {}) as { index?: unknown; message?: Record<string, unknown>; finish_reason?: unknown };
  const m = c.message ?? {};
  const { content, reasoning } = splitContent(m['content']);
  // `refusal` and the choice's `logprobs` are never left out of OpenAI's answer (its SDK types them `| null`, not
  // optional); Mistral has neither, so they are null here, as in OpenAI's and vLLM's answers.
  const message: Record<string, unknown> = { role: 'assistant', content, refusal: null };
  if (reasoning !== null) message['reasoning_content'] = reasoning;
  if (Array.isArray(m['tool_calls']) && m['tool_calls'].length > 0) {
    // Mistral leaves `type` out of its calls (its schema defaults it); OpenAI's clients need it: the SDK's tool runner
    // refuses a call without it, and OpenAI's API (Azure's) refuses such a call sent back on the next turn.
    message['tool_calls'] = (mapToolCalls(m['tool_calls']) as Record<string, unknown>[]).map(({ index: _index, ...rest }) => ({
      ...rest,
      type: rest['type'] ?? 'function',
    }));
    // OpenAI's tool-call answer has content null; a client testing for content would take Mistral's "" for some.
    if (content === '') message['content'] = null;
  }
  return { index: c.index ?? 0, message, logprobs: null, finish_reason: mapFinishReason(provider, c.finish_reason) };
}
