/**
 * Deterministic chat "generation": the answer echoes words of the last user message, split into pieces
 * that each count as one completion token. Prompt tokens are ~1 per 4 characters of the messages' text.
 */
import { isRecord } from '../core/http.js';

/** `model_length` is Mistral's for an answer the model's context ended, where vLLM and OpenAI say `length` (PROVIDERS §3.4). */
export type FinishReason = 'stop' | 'length' | 'tool_calls' | 'model_length';

export interface ToolCallPlan {
  name: string;
  arguments: string;
}

export interface ChatPlan {
  promptTokens: number;
  /** Reasoning pieces (empty unless the model reasons). */
  reasoning: string[];
  /** Answer pieces; their concatenation is the answer text. */
  content: string[];
  /** The tool calls the answer makes, in order (none for a text answer). */
  toolCalls: ToolCallPlan[];
  finishReason: FinishReason;
  completionTokens: number;
}

export interface ChatInput {
  messages: unknown[];
  provider: string;
  model: string;
  reasoning: boolean;
  maxTokens?: number | undefined;
  tools?: unknown;
  toolChoice?: unknown;
  /** The request's `parallel_tool_calls`: false keeps the answer to one call. */
  parallelToolCalls?: unknown;
  responseFormat?: unknown;
  stop?: unknown;
  /** Pad the answer to this many pieces (see ProviderSettings.answerTokens). */
  padTo?: number | null | undefined;
  /** Which of the request's `n` choices this is (from 0): the choices after the first say which they are, so they differ. */
  choice?: number;
}

/** Text of a message's `content` (string or parts), ignoring non-text parts. */
export function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  let out = '';
  for (const part of content) {
    if (isRecord(part) && typeof part['text'] === 'string') out += (out ? ' ' : '') + part['text'];
  }
  return out;
}

export const tokensOf = (text: string): number => Math.ceil(text.length / 4);

export function promptTokens(messages: unknown[]): number {
  let chars = 0;
  for (const m of messages) {
    if (!isRecord(m)) continue;
    chars += contentText(m['content']).length;
    if (Array.isArray(m['tool_calls'])) chars += JSON.stringify(m['tool_calls']).length;
  }
  return Math.max(1, Math.ceil(chars / 4));
}

export const wordsOf = (text: string): string[] => text.match(/[\p{L}\p{N}][\p{L}\p{N}'’-]*/gu) ?? [];

/** Split text into pieces that keep their leading whitespace ("Hello", " world", "."). */
export const piecesOf = (text: string): string[] => text.match(/\s*\S+/g) ?? [];

function lastOf(messages: unknown[], role: string): Record<string, unknown> | undefined {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i];
    if (isRecord(m) && m['role'] === role) return m;
  }
  return undefined;
}

export function planChat(input: ChatInput): ChatPlan {
  const { messages } = input;
  const last = messages[messages.length - 1];
  const lastRole = isRecord(last) ? last['role'] : undefined;
  const userText = contentText(lastOf(messages, 'user')?.['content']);
  const words = wordsOf(userText).slice(0, 10);
  const topic = words.length > 0 ? words.join(' ') : 'your message';
  const budget = input.maxTokens ?? Number.POSITIVE_INFINITY;

  const reasoning = input.reasoning ? piecesOf(`The user asks about ${words.slice(0, 6).join(' ') || 'something'}. A short direct answer fits best.`) : [];
  const reasoningKept = reasoning.slice(0, Math.min(reasoning.length, budget));
  const left = budget - reasoningKept.length;

  // `auto` calls a tool only to answer the user; `required` or a named function forces a call on every turn, after a
  // tool result too, as the providers do (an agent loop with a forced choice never gets text).
  const forced = input.toolChoice === 'required' || isRecord(input.toolChoice);
  const toolCalls = lastRole === 'user' || forced ? planToolCalls(input, userText, words) : [];
  if (toolCalls.length > 0 && left > 0) {
    return {
      promptTokens: promptTokens(messages),
      reasoning: reasoningKept,
      content: [],
      toolCalls,
      finishReason: 'tool_calls',
      completionTokens: reasoningKept.length + toolCalls.reduce((n, c) => n + tokensOf(c.arguments), 0),
    };
  }

  let text: string;
  if (lastRole === 'tool') {
    const result = wordsOf(contentText(isRecord(last) ? last['content'] : ''))
      .slice(0, 8)
      .join(' ');
    text = `According to the tool result (${result || 'empty'}), here is the answer from ${input.provider}.`;
  } else {
    const which = input.choice ? ` #${input.choice + 1}` : '';
    text = `Simulated answer${which} from ${input.provider} (${input.model}) about: ${topic}.`;
  }
  if (input.padTo) text = pad(text, words, input.padTo);
  const json = jsonAnswer(input.responseFormat, text, words);
  if (json !== null) text = json;
  let finishReason: FinishReason = 'stop';
  const stopAt = firstStop(text, input.stop);
  if (stopAt >= 0) text = text.slice(0, stopAt);
  let content = json !== null ? chunksOf(text, 6) : piecesOf(text);
  if (left < content.length) {
    content = content.slice(0, Math.max(0, left));
    finishReason = 'length';
  }
  if (reasoningKept.length < reasoning.length) finishReason = 'length';
  return {
    promptTokens: promptTokens(messages),
    reasoning: reasoningKept,
    content,
    toolCalls: [],
    finishReason,
    completionTokens: reasoningKept.length + content.length,
  };
}

/** Extend the answer with the user's words (or filler) until it has `n` pieces. */
function pad(text: string, words: string[], n: number): string {
  const pieces = piecesOf(text);
  const filler = words.length > 0 ? words : ['and', 'so', 'on'];
  for (let i = 0; pieces.length < n; i++) pieces.push(` ${filler[i % filler.length]}`);
  return pieces.join('');
}

function chunksOf(text: string, size: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out;
}

/** Where the first stop string starts, or -1; an empty stop string, alone or in a list, is ignored as the hosts ignore it. */
function firstStop(text: string, stop: unknown): number {
  const asked = typeof stop === 'string' ? [stop] : Array.isArray(stop) ? stop : [];
  const stops = asked.filter((s): s is string => typeof s === 'string' && s !== '');
  let at = -1;
  for (const s of stops) {
    const i = text.indexOf(s);
    if (i >= 0 && (at < 0 || i < at)) at = i;
  }
  return at;
}

function jsonAnswer(format: unknown, text: string, words: string[]): string | null {
  if (!isRecord(format)) return null;
  if (format['type'] === 'json_object') return JSON.stringify({ answer: text });
  if (format['type'] === 'json_schema') {
    const js = format['json_schema'];
    return JSON.stringify(sample(isRecord(js) ? js['schema'] : undefined, words, 0));
  }
  return null;
}

interface ToolDef {
  name: string;
  parameters: unknown;
}

/**
 * The calls an answer makes: parallel calls when the user's message names tools two or more times (one call per
 * mention, in order, the same tool again for each of its mentions, each call's strings taken from the words after its
 * mention), unless `parallel_tool_calls` is false or `tool_choice` names one function; else the one call of pickTool.
 */
function planToolCalls(input: ChatInput, userText: string, words: string[]): ToolCallPlan[] {
  const defs = toolDefs(input.tools);
  if (defs.length === 0 || input.toolChoice === 'none') return [];
  if (input.parallelToolCalls !== false && !isRecord(input.toolChoice)) {
    const mentions = mentionsOf(defs, userText);
    if (mentions.length >= 2) {
      return mentions.map((m, i) => {
        const after = wordsOf(userText.slice(m.end, mentions[i + 1]?.at ?? userText.length)).slice(0, 10);
        return { name: m.def.name, arguments: JSON.stringify(sample(m.def.parameters, after, 0)) };
      });
    }
  }
  const tool = pickTool(defs, input.toolChoice, userText);
  return tool ? [{ name: tool.name, arguments: JSON.stringify(sample(tool.parameters, words, 0)) }] : [];
}

function toolDefs(tools: unknown): ToolDef[] {
  const defs: ToolDef[] = [];
  if (!Array.isArray(tools)) return defs;
  for (const t of tools) {
    const fn = isRecord(t) ? t['function'] : undefined;
    if (isRecord(fn) && typeof fn['name'] === 'string' && fn['name'] !== '') defs.push({ name: fn['name'], parameters: fn['parameters'] });
  }
  return defs;
}

/** Where the text names a tool (its name, or with spaces for underscores), in order; a longer name wins where two overlap. */
function mentionsOf(defs: ToolDef[], text: string): { def: ToolDef; at: number; end: number }[] {
  const lower = text.toLowerCase();
  const found: { def: ToolDef; at: number; end: number }[] = [];
  for (const def of defs) {
    const name = def.name.toLowerCase();
    for (const form of new Set([name, name.replaceAll('_', ' ')])) {
      for (let at = lower.indexOf(form); at >= 0; at = lower.indexOf(form, at + form.length)) found.push({ def, at, end: at + form.length });
    }
  }
  found.sort((a, b) => a.at - b.at || b.end - a.end);
  const kept: typeof found = [];
  for (const m of found) if (m.at >= (kept.at(-1)?.end ?? 0)) kept.push(m);
  return kept;
}

function pickTool(defs: ToolDef[], choice: unknown, userText: string): ToolDef | null {
  if (isRecord(choice)) {
    const fn = choice['function'];
    const name = isRecord(fn) ? fn['name'] : undefined;
    return defs.find((d) => d.name === name) ?? null;
  }
  const lower = userText.toLowerCase();
  return defs.find((d) => lower.includes(d.name.toLowerCase()) || lower.includes(d.name.toLowerCase().replaceAll('_', ' '))) ?? defs[0] ?? null;
}

/** A value that fits a JSON schema, using the user's words for strings. */
export function sample(schema: unknown, words: string[], depth: number): unknown {
  if (!isRecord(schema) || depth > 4) return {};
  if (Array.isArray(schema['enum']) && schema['enum'].length > 0) return schema['enum'][0];
  const type = Array.isArray(schema['type']) ? schema['type'][0] : schema['type'];
  switch (type) {
    case 'string': {
      const capital = words.slice(1).find((w) => /^\p{Lu}/u.test(w));
      return capital ?? (words.slice(0, 3).join(' ') || 'example');
    }
    case 'number':
      return 1.5;
    case 'integer':
      return 1;
    case 'boolean':
      return true;
    case 'array':
      return [sample(schema['items'], words, depth + 1)];
    case 'null':
      return null;
    default: {
      const props = schema['properties'];
      const out: Record<string, unknown> = {};
      if (isRecord(props)) for (const [k, v] of Object.entries(props)) out[k] = sample(v, words, depth + 1);
      return out;
    }
  }
}
