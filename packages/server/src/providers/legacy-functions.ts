import { GatewayError } from '../errors/gateway-error.js';
import type { ChatBody, ChatChunk, ChatStream, ChunkSink } from './types.js';

/**
 * OpenAI's deprecated functions API (`functions`, `function_call`, an assistant's `function_call`, a `function`
 * message) sent as its tools API, which every provider here takes, while none documents the older one: vLLM hosts
 * ignore `functions` (their request schema lacks it), Mistral's strict schema has none of it, and open-weight chat
 * templates know no `function` role. The answer goes back in the functions API's shape to a client that gave
 * `functions` (docs/adapters.md).
 */

/** The id of the call made by the assistant message at `index`: the same every round, and 9 alphanumerics, as Mistral takes. */
function callId(index: number): string {
  return `call${String(index).padStart(5, '0')}`;
}

/**
 * A `function_call` OpenAI refuses with a 400: neither `none`, `auto` nor `{name}` of a function `functions` lists.
 * As its tools form, a provider would refuse it in its own words or answer as if it named nothing.
 */
function checkFunctionCall(body: ChatBody): void {
  const choice = body['function_call'];
  if (choice === undefined || choice === 'none' || choice === 'auto') return;
  if (choice === null || typeof choice !== 'object') {
    throw new GatewayError('validation', `Invalid body: 'function_call' must be 'none', 'auto' or {"name": …} naming one of 'functions'.`, {
      param: 'function_call',
    });
  }
  const functions = body['functions'];
  const names = Array.isArray(functions) ? functions.map((f) => (f as { name?: unknown } | null)?.name) : [];
  if (names.length === 0) {
    throw new GatewayError('validation', "Invalid body: 'function_call' names a function, but 'functions' gives none.", { param: 'function_call' });
  }
  const name = (choice as { name?: unknown }).name;
  if (!names.includes(name)) {
    const param = 'function_call.name';
    const said = typeof name === 'string' ? `names '${name}', which is not among` : 'must name one of';
    throw new GatewayError('validation', `Invalid body: '${param}' ${said} 'functions' (${names.join(', ')}).`, { param });
  }
}

/** Rewrites the body, in place, from the functions API to the tools API; refuses a `function_call` OpenAI refuses. */
export function toToolsApi(body: ChatBody): void {
  checkFunctionCall(body);
  const functions = body['functions'];
  if (Array.isArray(functions)) {
    const tools = Array.isArray(body['tools']) ? body['tools'] : [];
    body['tools'] = [...tools, ...functions.map((f) => ({ type: 'function', function: f }))];
  }
  const choice = body['function_call'];
  if (choice !== undefined && body['tool_choice'] === undefined) {
    const name = (choice as { name?: unknown } | null)?.name;
    body['tool_choice'] = typeof choice === 'object' && choice !== null ? { type: 'function', function: { name } } : choice;
  }
  // Set undefined rather than deleted: JSON leaves it out, and the body keeps its shape.
  body['functions'] = undefined;
  body['function_call'] = undefined;
  const messages = body.messages as Record<string, unknown>[];
  let lastCall: string | null = null;
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i] as Record<string, unknown>;
    const call = m['function_call'] as { name?: unknown; arguments?: unknown } | undefined;
    if (m['role'] === 'assistant' && call !== undefined) {
      lastCall = callId(i);
      const { function_call: _call, ...rest } = m;
      const calls = Array.isArray(m['tool_calls']) ? m['tool_calls'] : [];
      const asTool = { id: lastCall, type: 'function', function: { name: call.name, arguments: call.arguments ?? '{}' } };
      messages[i] = { ...rest, tool_calls: [...calls, asTool] };
    } else if (m['role'] === 'function') {
      // The result of the call made last before it, as the functions API pairs them.
      messages[i] = { role: 'tool', tool_call_id: lastCall ?? callId(i), content: m['content'] ?? '' };
    }
  }
}

interface ToolCallPart {
  index?: number;
  function?: { name?: unknown; arguments?: unknown };
}

/** The first tool call as a `function_call` (the functions API has one call an answer); undefined without one. */
function firstAsFunctionCall(calls: unknown): Record<string, unknown> | undefined {
  if (!Array.isArray(calls)) return undefined;
  const first = (calls as ToolCallPart[]).find((c) => (c?.index ?? 0) === 0);
  const fn = first?.function;
  if (!fn) return undefined;
  const out: Record<string, unknown> = {};
  if (fn.name !== undefined) out['name'] = fn.name;
  out['arguments'] = fn.arguments ?? '';
  return out;
}

function finishAsFunctions(reason: unknown): unknown {
  return reason === 'tool_calls' ? 'function_call' : reason;
}

/** A completion's choice as the functions API answers: the call under `message.function_call`, finish reason `function_call`. */
export function toFunctionsChoice(choice: unknown): unknown {
  const c = choice as { message?: Record<string, unknown>; finish_reason?: unknown } | null;
  const message = c?.message;
  if (!message || message['tool_calls'] === undefined) return choice;
  const { tool_calls, ...rest } = message;
  const call = firstAsFunctionCall(tool_calls);
  return { ...c, message: call ? { ...rest, function_call: call } : rest, finish_reason: finishAsFunctions(c.finish_reason) };
}

/**
 * A chunk as the functions API streams it. One that changes is a copy: the chunk may carry the provider's own text,
 * which would be relayed instead of its changed fields (chunk-json.ts).
 */
function toFunctionsChunk(chunk: ChatChunk): ChatChunk {
  let choices: unknown[] | null = null;
  for (let i = 0; i < chunk.choices.length; i++) {
    const choice = chunk.choices[i] as { delta?: Record<string, unknown>; finish_reason?: unknown } | null;
    const delta = choice?.delta;
    const calls = delta?.['tool_calls'];
    if (!choice || (calls === undefined && choice.finish_reason !== 'tool_calls')) continue;
    choices ??= [...chunk.choices];
    const out: Record<string, unknown> = { ...choice, finish_reason: finishAsFunctions(choice.finish_reason) };
    if (delta && calls !== undefined) {
      const { tool_calls: _calls, ...rest } = delta;
      const call = firstAsFunctionCall(calls);
      out['delta'] = call ? { ...rest, function_call: call } : rest;
    }
    choices[i] = out;
  }
  return choices === null ? chunk : { ...chunk, choices };
}

/** The stream with its chunks as the functions API streams them. */
export function functionsStream(upstream: ChatStream): ChatStream {
  return {
    relay(sink: ChunkSink): void {
      upstream.relay({ chunk: (c) => sink.chunk(toFunctionsChunk(c)), end: (e) => sink.end(e), unfinished: (n) => sink.unfinished?.(n) });
    },
    abort: () => upstream.abort(),
    async *[Symbol.asyncIterator]() {
      for await (const c of upstream) yield toFunctionsChunk(c);
    },
  };
}
