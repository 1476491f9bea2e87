import { UpstreamError } from '../../errors/upstream-error.js';
import { streamErrorEvent } from '../error-status.js';
import { type UpstreamBody, type UpstreamHttp, upstreamErrorMessage } from '../http-client.js';
import { mapFinishReason, mapToolCallDeltas } from '../openai-shape.js';
import { isStreamErrorObject, SSE_DONE, sseChunkStream } from '../sse-chunk-stream.js';
import { hasToolCallDeltas, StreamToolCalls } from '../tool-call-index.js';
import type { ChatChunk, ChatStream } from '../types.js';
import { cleanUsage, splitContent } from './chat.js';
import { mistralMessage } from './errors.js';

/**
 * Mistral's stream as normalised chunks: thinking content arrays become
 * `delta.reasoning_content`, the usage that rides on the last content
 * chunk is split into its own `choices: []` chunk, `model_length` becomes
 * `length`, tool calls are numbered across the stream (tool-call-index.ts),
 * and an error object mid-stream (Mistral's own shape, without an `error`
 * key) or an end without `[DONE]` throws.
 */
export function mistralChunkStream(http: UpstreamHttp, body: UpstreamBody): ChatStream {
  const provider = http.providerId;
  let toolCalls: StreamToolCalls | null = null;
  return sseChunkStream(http, body, (event) => {
    if (event.data === '[DONE]') return SSE_DONE;
    const raw = parse(provider, event.data, event.event === 'error');
    if (event.event === 'error' || isStreamErrorObject(raw)) {
      throw streamErrorEvent(provider, mistralMessage(raw), raw);
    }
    if (toolCalls === null && hasToolCallDeltas(raw['choices'])) toolCalls = new StreamToolCalls();
    return mapMistralChunk(provider, raw, toolCalls);
  });
}

function parse(provider: string, data: string, error: boolean): Record<string, unknown> {
  try {
    const parsed = JSON.parse(data) as unknown;
    if (parsed && typeof parsed === 'object') return parsed as Record<string, unknown>;
  } catch {
    // Reported below.
  }
  // An `error` event whose data is text (`Internal Server Error`): its words are the error's, not "no JSON".
  if (error) throw streamErrorEvent(provider, upstreamErrorMessage(data), null);
  throw new UpstreamError({ kind: 'protocol', provider, message: `${provider} sent an event that is not a JSON object` });
}

export function mapMistralChunk(provider: string, raw: Record<string, unknown>, toolCalls: StreamToolCalls | null): ChatChunk[] {
  const base = {
    id: typeof raw['id'] === 'string' ? raw['id'] : '',
    object: 'chat.completion.chunk' as const,
    created: typeof raw['created'] === 'number' ? raw['created'] : Math.floor(Date.now() / 1000),
    model: String(raw['model'] ?? ''),
  };
  const choices = Array.isArray(raw['choices']) ? raw['choices'].map((c) => mapDeltaChoice(provider, c, toolCalls)) : [];
  const usage = cleanUsage(raw['usage']);
  if (choices.length === 0) return [{ ...base, choices, usage }];
  // Mistral sends the last delta (a whole tool call, or the last words) with its finish_reason; OpenAI ends a
  // choice with a chunk of its own, an empty delta and the reason, and its SDK's stream helper relies on that
  // (a tool call finished in the same chunk never gets its `arguments.done` event).
  const finishing = choices.filter((c) => c.finish_reason !== null && Object.keys(c.delta).length > 0);
  const chunks: ChatChunk[] = [];
  if (finishing.length === 0) chunks.push({ ...base, choices, usage: null });
  else {
    chunks.push({ ...base, choices: choices.map((c) => (finishing.includes(c) ? { ...c, finish_reason: null } : c)), usage: null });
    chunks.push({ ...base, choices: finishing.map((c) => ({ index: c.index, delta: {}, finish_reason: c.finish_reason })), usage: null });
  }
  // The usage that rides on the last content chunk gets a `choices: []` chunk of its own.
  if (usage) chunks.push({ ...base, choices: [], usage });
  return chunks;
}

interface DeltaChoice {
  index: unknown;
  delta: Record<string, unknown>;
  finish_reason: ReturnType<typeof mapFinishReason>;
}

function mapDeltaChoice(provider: string, choice: unknown, toolCalls: StreamToolCalls | null): DeltaChoice {
  const c = (choice ?? {}) as { index?: unknown; delta?: Record<string, unknown>; finish_reason?: unknown };
  const delta: Record<string, unknown> = { ...(c.delta ?? {}) };
  if (Array.isArray(delta['content'])) {
    const { content, reasoning } = splitContent(delta['content']);
    delete delta['content'];
    if (reasoning) delta['reasoning_content'] = reasoning;
    if (content) delta['content'] = content;
  }
  const index = c.index ?? 0;
  // Each call with its own index across the stream (Mistral's leave it out, or repeat 0 for every call) and a type.
  const calls = delta['tool_calls'];
  if (Array.isArray(calls) && toolCalls !== null)
    delta['tool_calls'] = toolCalls.index(typeof index === 'number' ? index : 0, mapToolCallDeltas(calls) as unknown[]);
  return { index, delta, finish_reason: mapFinishReason(provider, c.finish_reason ?? null) };
}
