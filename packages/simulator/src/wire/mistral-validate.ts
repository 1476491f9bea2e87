/** Mistral's strict request schemas: unknown keys → 422 `extra_forbidden` (PROVIDERS §2, §4.2, §4.6). */
import { isRecord } from '../core/http.js';

export interface Issue {
  type: string;
  loc: (string | number)[];
  msg: string;
  input: unknown;
  ctx?: Record<string, unknown>;
}

const CHAT_KEYS = new Set([
  'model',
  'messages',
  'temperature',
  'top_p',
  'max_tokens',
  'stream',
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
  'reasoning_effort',
  'metadata',
  'guardrails',
  'prompt_cache_key',
]);
const EMBED_KEYS = new Set(['model', 'input', 'output_dimension', 'output_dtype', 'encoding_format', 'metadata']);
const MESSAGE_KEYS: Record<string, Set<string>> = {
  system: new Set(['role', 'content']),
  user: new Set(['role', 'content']),
  assistant: new Set(['role', 'content', 'tool_calls', 'prefix']),
  tool: new Set(['role', 'content', 'tool_call_id', 'name']),
};
/** Mistral's `Tool`, `Function`, `ToolCall` and `FunctionCall`: as strict as the body (an OpenAI SDK's `parsed_arguments` → 422). */
const TOOL_KEYS = new Set(['type', 'function']);
const FUNCTION_KEYS = new Set(['name', 'description', 'strict', 'parameters']);
const TOOL_CALL_KEYS = new Set(['id', 'type', 'function', 'index']);
const FUNCTION_CALL_KEYS = new Set(['name', 'arguments']);

function extras(obj: Record<string, unknown>, allowed: Set<string>, loc: (string | number)[]): Issue[] {
  return Object.keys(obj)
    .filter((k) => !allowed.has(k))
    .map((k) => ({ type: 'extra_forbidden', loc: [...loc, k], msg: 'Extra inputs are not permitted', input: obj[k] }));
}

function missing(obj: Record<string, unknown>, keys: string[], loc: (string | number)[]): Issue[] {
  return keys.filter((k) => obj[k] === undefined).map((k) => ({ type: 'missing', loc: [...loc, k], msg: 'Field required', input: obj }));
}

function typed(obj: Record<string, unknown>, key: string, kind: 'number' | 'integer' | 'boolean' | 'string'): Issue[] {
  const v = obj[key];
  if (v === undefined || v === null) return [];
  const ok = kind === 'integer' ? Number.isInteger(v) : typeof v === kind;
  if (ok) return [];
  const names = {
    number: ['float_type', 'a valid number'],
    integer: ['int_type', 'a valid integer'],
    boolean: ['bool_type', 'a valid boolean'],
    string: ['string_type', 'a valid string'],
  } as const;
  return [{ type: names[kind][0], loc: ['body', key], msg: `Input should be ${names[kind][1]}`, input: v }];
}

/** Pydantic's refusal of a number outside `[min, max]` (PROVIDERS §2: temperature 0..1.5, top_p 0..1). */
function ranged(obj: Record<string, unknown>, key: string, min: number, max: number): Issue[] {
  const v = obj[key];
  if (typeof v !== 'number') return [];
  if (v > max) return [{ type: 'less_than_equal', loc: ['body', key], msg: `Input should be less than or equal to ${max}`, input: v, ctx: { le: max } }];
  if (v < min) return [{ type: 'greater_than_equal', loc: ['body', key], msg: `Input should be greater than or equal to ${min}`, input: v, ctx: { ge: min } }];
  return [];
}

export function validateChat(body: Record<string, unknown>): Issue[] {
  const issues = [...missing(body, ['model', 'messages'], ['body']), ...extras(body, CHAT_KEYS, ['body'])];
  issues.push(...typed(body, 'temperature', 'number'), ...typed(body, 'top_p', 'number'), ...typed(body, 'max_tokens', 'integer'));
  issues.push(...ranged(body, 'temperature', 0, 1.5), ...ranged(body, 'top_p', 0, 1));
  issues.push(...typed(body, 'random_seed', 'integer'), ...typed(body, 'stream', 'boolean'), ...typed(body, 'model', 'string'));
  issues.push(...typed(body, 'n', 'integer'));
  const effort = body['reasoning_effort'];
  if (effort !== undefined && effort !== null && effort !== 'high' && effort !== 'none') {
    issues.push({
      type: 'enum',
      loc: ['body', 'reasoning_effort'],
      msg: "Input should be 'high' or 'none'",
      input: effort,
      ctx: { expected: "'high' or 'none'" },
    });
  }
  const messages = body['messages'];
  if (messages !== undefined && !Array.isArray(messages))
    issues.push({ type: 'list_type', loc: ['body', 'messages'], msg: 'Input should be a valid list', input: messages });
  if (Array.isArray(messages)) {
    messages.forEach((m, i) => {
      const role = isRecord(m) ? m['role'] : undefined;
      const allowed = typeof role === 'string' ? MESSAGE_KEYS[role] : undefined;
      if (!isRecord(m) || allowed === undefined) {
        issues.push({
          type: 'union_tag_invalid',
          loc: ['body', 'messages', i],
          msg: `Input tag '${String(role)}' found using 'role' does not match any of the expected tags: 'assistant', 'system', 'tool', 'user'`,
          input: m,
        });
      } else {
        issues.push(...extras(m, allowed, ['body', 'messages', i, role as string]));
        if (role === 'assistant' && Array.isArray(m['tool_calls']))
          issues.push(...toolCallIssues(m['tool_calls'], ['body', 'messages', i, role, 'tool_calls']));
        if (Array.isArray(m['content'])) issues.push(...chunkIssues(m['content'], ['body', 'messages', i, role as string, 'content']));
      }
    });
  }
  if (Array.isArray(body['tools'])) issues.push(...toolIssues(body['tools']));
  const format = body['response_format'];
  // Mistral's `JsonSchema` requires its schema, where OpenAI's may be left out.
  if (isRecord(format) && format['type'] === 'json_schema' && isRecord(format['json_schema']))
    issues.push(...missing(format['json_schema'], ['name', 'schema'], ['body', 'response_format', 'json_schema']));
  return issues;
}

/** A tool's function must give its `parameters` (OpenAI's may leave them out for a function without any). */
function toolIssues(tools: unknown[]): Issue[] {
  const issues: Issue[] = [];
  tools.forEach((tool, i) => {
    if (!isRecord(tool)) return;
    issues.push(...extras(tool, TOOL_KEYS, ['body', 'tools', i]));
    const fn = tool['function'];
    if (isRecord(fn))
      issues.push(...missing(fn, ['name', 'parameters'], ['body', 'tools', i, 'function']), ...extras(fn, FUNCTION_KEYS, ['body', 'tools', i, 'function']));
  });
  return issues;
}

function toolCallIssues(calls: unknown[], loc: (string | number)[]): Issue[] {
  const issues: Issue[] = [];
  calls.forEach((call, j) => {
    if (!isRecord(call)) return;
    issues.push(...extras(call, TOOL_CALL_KEYS, [...loc, j]));
    const fn = call['function'];
    if (isRecord(fn)) issues.push(...extras(fn, FUNCTION_CALL_KEYS, [...loc, j, 'function']));
  });
  return issues;
}

/** Mistral's content chunks (its `ContentChunk` union): OpenAI's `refusal` part is none of them, its `input_audio` is a string. */
const CHUNK_TYPES = ['text', 'image_url', 'input_audio', 'document_url', 'file', 'reference', 'thinking'];

function chunkIssues(parts: unknown[], loc: (string | number)[]): Issue[] {
  const issues: Issue[] = [];
  parts.forEach((part, j) => {
    const type = isRecord(part) ? part['type'] : undefined;
    if (!isRecord(part) || typeof type !== 'string' || !CHUNK_TYPES.includes(type)) {
      const expected = CHUNK_TYPES.map((t) => `'${t}'`).join(', ');
      issues.push({
        type: 'union_tag_invalid',
        loc: [...loc, j],
        msg: `Input tag '${String(type)}' found using 'type' does not match any of the expected tags: ${expected}`,
        input: part,
      });
    } else if (type === 'input_audio' && typeof part['input_audio'] !== 'string') {
      issues.push({ type: 'string_type', loc: [...loc, j, 'input_audio'], msg: 'Input should be a valid string', input: part['input_audio'] });
    } else if (type === 'file' && typeof part['file_id'] !== 'string') {
      issues.push({ type: 'missing', loc: [...loc, j, 'file', 'file_id'], msg: 'Field required', input: part });
    }
  });
  return issues;
}

export function validateEmbeddings(body: Record<string, unknown>): Issue[] {
  const issues = [...missing(body, ['model', 'input'], ['body']), ...extras(body, EMBED_KEYS, ['body'])];
  issues.push(...typed(body, 'output_dimension', 'integer'));
  for (const [key, allowed] of [
    ['output_dtype', ['float', 'int8', 'uint8', 'binary', 'ubinary']],
    ['encoding_format', ['float', 'base64']],
  ] as const) {
    const v = body[key];
    if (v !== undefined && v !== null && !(allowed as readonly unknown[]).includes(v)) {
      const expected = allowed.map((a) => `'${a}'`).join(', ');
      issues.push({ type: 'enum', loc: ['body', key], msg: `Input should be ${expected}`, input: v, ctx: { expected } });
    }
  }
  return issues;
}

const TOOL_ID = /^[a-zA-Z0-9]{9}$/;

/** Semantic checks Mistral answers with 400 (after schema validation passed). */
export function semanticChatError(messages: unknown[]): { message: string; type: string; code: string | null } | null {
  let previous: unknown;
  for (const m of messages) {
    if (!isRecord(m)) continue;
    // Mistral's message-order check: a tool result is followed by another one or the assistant's turn, never by a
    // user (or system) message, which OpenAI's API and vLLM hosts take.
    if (previous === 'tool' && m['role'] !== 'assistant' && m['role'] !== 'tool') {
      return { message: `Unexpected role '${String(m['role'])}' after role 'tool'`, type: 'invalid_request_message_order', code: '3230' };
    }
    previous = m['role'];
    if (m['role'] === 'assistant') {
      const calls = m['tool_calls'];
      const hasCalls = Array.isArray(calls) && calls.length > 0;
      const content = m['content'];
      const empty = content === undefined || content === null || content === '' || (Array.isArray(content) && content.length === 0);
      if (empty && !hasCalls) {
        return { message: 'Assistant message must have either content or tool_calls, but not none.', type: 'invalid_request_error', code: null };
      }
      for (const c of hasCalls ? (calls as unknown[]) : []) {
        const id = isRecord(c) ? c['id'] : undefined;
        if (typeof id === 'string' && !TOOL_ID.test(id)) return toolIdError(id);
      }
    }
    if (m['role'] === 'tool' && typeof m['tool_call_id'] === 'string' && !TOOL_ID.test(m['tool_call_id'])) return toolIdError(m['tool_call_id']);
  }
  const last = messages[messages.length - 1];
  const role = isRecord(last) ? last['role'] : undefined;
  if (role !== 'user' && role !== 'tool' && !(role === 'assistant' && isRecord(last) && last['prefix'] === true)) {
    return {
      message: `Expected last role User or Tool (or Assistant with prefix True) for serving but got ${String(role)}`,
      type: 'invalid_request_error',
      code: null,
    };
  }
  return null;
}

function toolIdError(id: string): { message: string; type: string; code: string } {
  return { message: `Tool call id was ${id} but must be a-z, A-Z, 0-9, with a length of 9.`, type: 'invalid_function_call', code: '3280' };
}
