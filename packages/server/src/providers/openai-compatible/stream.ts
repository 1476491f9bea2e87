import { UpstreamError } from '../../errors/upstream-error.js';
import { keepWireText } from '../chunk-json.js';
import { streamErrorEvent } from '../error-status.js';
import type { UpstreamBody, UpstreamHttp } from '../http-client.js';
import { upstreamErrorMessage } from '../http-client.js';
import { isOpenAiFinishReason, mapFinishReason, mapToolCallDeltas } from '../openai-shape.js';
import { providerUsage } from '../provider-usage.js';
import { isStreamErrorObject, SSE_DONE, type SseDecoder, sseChunkStream } from '../sse-chunk-stream.js';
import { ThinkTagSplitter } from '../think-tags.js';
import { hasToolCallDeltas, StreamToolCalls } from '../tool-call-index.js';
import type { ChatChunk, ChatStream } from '../types.js';

/**
 * Turns an OpenAI-style SSE body into normalised chunks: vLLM's `reasoning`
 * becomes `reasoning_content`, usage riding on a content chunk is split
 * into its own `choices: []` chunk, an error object mid-stream (OpenAI's
 * `error` key, or vLLM's `"object": "error"`, which it follows with
 * `[DONE]`) or an end
 * without `[DONE]` fails the stream; reasoning a model writes between
 * `<think>` tags in its content becomes `reasoning_content`; tool calls a
 * host does not key by their own `index` are numbered (tool-call-index.ts).
 */
export function openAiChunkStream(http: UpstreamHttp, body: UpstreamBody): ChatStream {
  return sseChunkStream(http, body, openAiDecoder(http.providerId));
}

export function openAiDecoder(provider: string): SseDecoder {
  const thinking = new Map<number, ThinkTagSplitter>();
  // The last chunk's identity (not the chunk: a stream would keep it for its whole life), for what a splitter still
  // holds at [DONE] (a stream whose choices gave no finish reason).
  let last: { id: unknown; created: unknown; model: unknown } | null = null;
  // Made at the stream's first tool-call delta.
  let toolCalls: StreamToolCalls | null = null;
  const decode: SseDecoder = (event) => {
    if (event.data === '[DONE]') return SSE_DONE;
    let parsed: RawChunk;
    try {
      parsed = JSON.parse(event.data) as RawChunk;
    } catch {
      parsed = null as unknown as RawChunk;
    }
    if (parsed === null || typeof parsed !== 'object') {
      // An `error` event whose data is text (`Internal Server Error`): its words are the error's, not "no JSON".
      if (event.event === 'error') throw streamErrorEvent(provider, upstreamErrorMessage(event.data), null);
      throw new UpstreamError({ kind: 'protocol', provider, message: `${provider} sent an event that is not a JSON object` });
    }
    if (event.event === 'error' || isStreamErrorObject(parsed)) {
      throw streamErrorEvent(provider, upstreamErrorMessage(parsed), parsed);
    }
    const split = splitThinkTags(parsed, thinking);
    if (last === null || last.id !== parsed.id) last = { id: parsed.id, created: parsed.created, model: parsed.model };
    let indexed: RawChunk | null = null;
    if (toolCalls !== null || hasToolCallDeltas(parsed.choices)) {
      toolCalls ??= new StreamToolCalls();
      indexed = indexToolCalls(split ?? parsed, toolCalls);
    }
    if (indexed !== null || split !== null || !alreadyNormal(parsed)) return normalise(provider, indexed ?? split ?? parsed);
    // Passed on as it came: relayed as the provider wrote it (only the model name is rewritten).
    parsed.usage ??= null;
    return [keepWireText(parsed, event.data)];
  };
  decode.flush = () => {
    const choices: unknown[] = [];
    for (const [index, splitter] of thinking) {
      const rest = splitter.flush();
      if (rest.content !== '' || rest.reasoning !== '') {
        choices.push({ index, delta: rest.reasoning === '' ? { content: rest.content } : { reasoning_content: rest.reasoning }, finish_reason: null });
      }
    }
    return choices.length === 0 || last === null ? [] : normalise(provider, { ...last, choices, usage: null });
  };
  return decode;
}

/** The chunk is what normalise() would make of it (at most a `usage: null` short), so it needs no copy. */
function alreadyNormal(raw: RawChunk): raw is RawChunk & ChatChunk {
  if (typeof raw.id !== 'string' || raw['object'] !== 'chat.completion.chunk' || typeof raw.created !== 'number' || typeof raw.model !== 'string') return false;
  if (!Array.isArray(raw.choices)) return false;
  const usage = raw.usage;
  if (usage !== undefined && usage !== null && (raw.choices.length > 0 || providerUsage(usage) !== usage)) return false;
  for (const choice of raw.choices) {
    const c = choice as { index?: unknown; finish_reason?: unknown; delta?: { tool_calls?: unknown } } | null;
    if (
      typeof c?.index !== 'number' ||
      renameReasoning(choice) !== choice ||
      !isOpenAiFinishReason(c?.finish_reason) ||
      hasObjectArguments(c?.delta?.tool_calls)
    )
      return false;
  }
  return true;
}

/** Tool-call deltas whose arguments some hosts send as an object: OpenAI's clients concatenate strings. */
function hasObjectArguments(calls: unknown): boolean {
  if (!Array.isArray(calls)) return false;
  return calls.some((call) => {
    const args = (call as { function?: { arguments?: unknown } } | null)?.function?.arguments;
    return args !== undefined && typeof args !== 'string';
  });
}

/**
 * The chunk with `<think>` reasoning moved out of its choices' content, or null when nothing changes (every
 * choice's content already passing as it comes, the case of all but a stream's first content chunk).
 */
function splitThinkTags(raw: RawChunk, thinking: Map<number, ThinkTagSplitter>): RawChunk | null {
  if (!Array.isArray(raw.choices)) return null;
  let choices: unknown[] | null = null;
  for (let at = 0; at < raw.choices.length; at++) {
    const c = raw.choices[at] as { index?: unknown; delta?: Record<string, unknown> | null; finish_reason?: unknown } | null;
    const index = typeof c?.index === 'number' ? c.index : 0;
    let splitter = thinking.get(index);
    if (splitter?.passing) continue;
    const content = c?.delta?.['content'];
    const finished = c?.finish_reason !== null && c?.finish_reason !== undefined;
    if (typeof content !== 'string' && !(finished && splitter)) continue;
    splitter ??= new ThinkTagSplitter();
    thinking.set(index, splitter);
    const out = typeof content === 'string' ? splitter.push(content) : { reasoning: '', content: '' };
    if (finished) {
      const rest = splitter.flush();
      out.reasoning += rest.reasoning;
      out.content += rest.content;
    }
    if (out.reasoning === '' && out.content === (content ?? '')) continue;
    const delta: Record<string, unknown> = { ...c?.delta, content: out.content };
    if (out.reasoning !== '') delta['reasoning_content'] = `${(c?.delta?.['reasoning_content'] as string | undefined) ?? ''}${out.reasoning}`;
    choices ??= [...(raw.choices as unknown[])];
    choices[at] = { ...c, delta };
  }
  return choices === null ? null : { ...raw, choices };
}

/** The chunk with its tool calls numbered across the stream, or null when every call already came so (vLLM's, OpenAI's). */
function indexToolCalls(raw: RawChunk, toolCalls: StreamToolCalls): RawChunk | null {
  if (!Array.isArray(raw.choices)) return null;
  let choices: unknown[] | null = null;
  for (let at = 0; at < raw.choices.length; at++) {
    const c = raw.choices[at] as { index?: unknown; delta?: Record<string, unknown> | null } | null;
    const calls = c?.delta?.['tool_calls'];
    if (!Array.isArray(calls)) continue;
    const indexed = toolCalls.index(typeof c?.index === 'number' ? c.index : 0, calls);
    if (indexed === calls) continue;
    choices ??= [...raw.choices];
    choices[at] = { ...c, delta: { ...c?.delta, tool_calls: indexed } };
  }
  return choices === null ? null : { ...raw, choices };
}

interface RawChunk {
  id?: unknown;
  created?: unknown;
  model?: unknown;
  choices?: unknown;
  usage?: unknown;
  error?: unknown;
  [extra: string]: unknown;
}

function normalise(provider: string, raw: RawChunk): ChatChunk[] {
  const choices = Array.isArray(raw.choices) ? raw.choices.map((choice, at) => withIndex(withOpenAiFinish(provider, renameReasoning(choice)), at)) : [];
  const base = {
    ...raw,
    id: typeof raw.id === 'string' ? raw.id : '',
    object: 'chat.completion.chunk' as const,
    created: typeof raw.created === 'number' ? raw.created : Math.floor(Date.now() / 1000),
    model: String(raw.model ?? ''),
  };
  const usage = providerUsage(raw.usage);
  if (usage && choices.length > 0) {
    return [
      { ...base, choices, usage: null },
      { ...base, choices: [], usage },
    ];
  }
  return [{ ...base, choices, usage }];
}

/**
 * A choice with its `index`, its place in the chunk when the host left it out: OpenAI's clients key a stream's
 * choices by it (the SDK's stream helper throws "invalid choice index: undefined", the AI SDK's schema refuses it).
 */
function withIndex(choice: unknown, at: number): unknown {
  const c = choice as { index?: unknown } | null;
  return c === null || typeof c !== 'object' || typeof c.index === 'number' ? choice : { ...c, index: at };
}

function withOpenAiFinish(provider: string, choice: unknown): unknown {
  const c = choice as { finish_reason?: unknown; delta?: Record<string, unknown> } | null;
  if (!c) return choice;
  const mapped = isOpenAiFinishReason(c.finish_reason) ? c : { ...c, finish_reason: mapFinishReason(provider, c.finish_reason) };
  const calls = c.delta?.['tool_calls'];
  return hasObjectArguments(calls) ? { ...mapped, delta: { ...c.delta, tool_calls: mapToolCallDeltas(calls) } } : mapped;
}

function renameReasoning(choice: unknown): unknown {
  const c = choice as { delta?: Record<string, unknown> } | null;
  const delta = c?.delta;
  if (!delta || typeof delta['reasoning'] !== 'string' || 'reasoning_content' in delta) return choice;
  const { reasoning, ...rest } = delta;
  return { ...c, delta: { ...rest, reasoning_content: reasoning } };
}
