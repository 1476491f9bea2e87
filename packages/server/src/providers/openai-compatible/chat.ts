import type { JsonResponse } from '../http-client.js';
import { isOpenAiFinishReason, isThinkingPart, mapFinishReason, mapToolCalls, withChoices, withoutThinking } from '../openai-shape.js';
import { providerUsage } from '../provider-usage.js';
import { opensWithThinkTag, splitThinkTags } from '../think-tags.js';
import type { ChatBody, ChatCompletion } from '../types.js';
import { httpError } from './errors.js';

/**
 * The body an OpenAI-compatible provider gets: the client's, under the provider's model name, without the `stripped`
 * keys the provider refuses; with `maxTokens` (for a provider whose default cap is tiny) and no cap of the client's,
 * that cap.
 */
export function toUpstreamChatBody(body: ChatBody, upstreamModel: string, maxTokens?: number, stripped: readonly string[] = []): Record<string, unknown> {
  const out: Record<string, unknown> = { ...body, model: upstreamModel, messages: body.messages.map(toUpstreamMessage), stream: false };
  if (maxTokens !== undefined && body['max_tokens'] == null && body['max_completion_tokens'] == null) out['max_tokens'] = maxTokens;
  // Set undefined rather than deleted: JSON leaves it out, and the copy keeps its shape.
  for (const key of stripped) if (out[key] !== undefined) out[key] = undefined;
  return out;
}

/** A streamed request always asks for usage, so every stream is billed from the provider's own count. */
export function toUpstreamStreamBody(body: ChatBody, upstreamModel: string, maxTokens?: number, stripped?: readonly string[]): Record<string, unknown> {
  // The one copy toUpstreamChatBody made, changed in place rather than copied again.
  const out = toUpstreamChatBody(body, upstreamModel, maxTokens, stripped);
  out['stream'] = true;
  out['stream_options'] = { include_usage: true };
  return out;
}

/**
 * A message as the provider gets it. Reasoning from an earlier turn is not sent back upstream (several providers
 * reject it): neither `reasoning_content`/`reasoning` nor the `thinking` parts of Mistral's content arrays, which a
 * client replaying Mistral's answers sends and OpenAI's API (Azure's) refuses (an assistant's parts are `text` and
 * `refusal`), as the Mistral adapter leaves them out for Mistral. A `developer` message, OpenAI's newer name for `system`, goes as `system`, in its place: the EU hosts
 * document no `developer` role (Vertex lists system, user, assistant, tool and function; PROVIDERS.md 12), vLLM hands
 * roles to the model's chat template as they come, and open-weight templates (Qwen's among them) refuse one they do
 * not know, while every host takes `system`, OpenAI's own API included.
 */
function toUpstreamMessage(message: unknown): unknown {
  if (!message || typeof message !== 'object') return message;
  const m = message as Record<string, unknown>;
  const developer = m['role'] === 'developer';
  const thinking = m['role'] === 'assistant' && Array.isArray(m['content']) && m['content'].some(isThinkingPart);
  if (!developer && !thinking && !('reasoning_content' in m) && !('reasoning' in m)) return message;
  const { reasoning_content: _rc, reasoning: _r, ...rest } = m;
  if (developer) rest['role'] = 'system';
  if (thinking) rest['content'] = withoutThinking(m['content'] as unknown[]);
  return rest;
}

export function parseChatCompletion(provider: string, res: JsonResponse): ChatCompletion {
  if (res.status < 200 || res.status >= 300) throw httpError(provider, res);
  const body = withChoices(provider, res.body) as Partial<ChatCompletion> & { choices: unknown[] };
  return {
    ...body,
    id: typeof body.id === 'string' ? body.id : `chatcmpl-${Date.now()}`,
    object: 'chat.completion',
    created: typeof body.created === 'number' ? body.created : Math.floor(Date.now() / 1000),
    model: String(body.model ?? ''),
    // A choice without its `index` (OpenAI's clients require it) gets its place in the list.
    choices: body.choices.map((choice, at) => {
      const c = normaliseChoice(provider, choice) as { index?: unknown };
      return typeof c.index === 'number' ? c : { ...c, index: at };
    }),
    // Counts the gateway can bill, or none: the route bills its estimate then.
    usage: providerUsage(body.usage) ?? undefined,
  };
}

/**
 * vLLM's newer `reasoning` becomes `reasoning_content`, the field most
 * clients read; vLLM's empty `tool_calls` list is left out, as OpenAI does
 * when there are none (a client testing `message.tool_calls` would take
 * `[]` for calls); tool-call arguments sent as an object become the JSON
 * string OpenAI's clients parse, and finish reasons are OpenAI's;
 * reasoning written between `<think>` tags in the content becomes
 * `reasoning_content`.
 */
function normaliseChoice(provider: string, choice: unknown): unknown {
  const c = choice as { message?: Record<string, unknown>; finish_reason?: unknown } | null;
  const message = c?.message;
  if (!message) return choice;
  const calls = message['tool_calls'];
  const emptyCalls = calls === null || (Array.isArray(calls) && calls.length === 0);
  const objectArguments =
    Array.isArray(calls) && calls.some((call) => typeof (call as { function?: { arguments?: unknown } })?.function?.arguments !== 'string');
  const renameReasoning = typeof message['reasoning'] === 'string' && !('reasoning_content' in message);
  const content = message['content'];
  const think = typeof content === 'string' && opensWithThinkTag(content) && !('reasoning_content' in message) ? splitThinkTags(content) : null;
  const thinkTags = think !== null && think.reasoning !== null;
  const finish = c.finish_reason;
  const otherFinish = !isOpenAiFinishReason(finish);
  if (!emptyCalls && !renameReasoning && !objectArguments && !otherFinish && !thinkTags) return choice;
  const { reasoning, tool_calls, ...rest } = message;
  return {
    ...c,
    message: {
      ...rest,
      ...(thinkTags ? { content: think.content, reasoning_content: think.reasoning } : {}),
      ...(emptyCalls ? {} : { tool_calls: objectArguments ? mapToolCalls(tool_calls) : tool_calls }),
      ...(renameReasoning ? { reasoning_content: reasoning } : reasoning === undefined ? {} : { reasoning }),
    },
    ...(otherFinish ? { finish_reason: mapFinishReason(provider, finish) } : {}),
  };
}
