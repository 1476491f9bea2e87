/** OpenAI-compatible chat completions (vLLM-style hosts and Azure), non-streaming and SSE (PROVIDERS §1.1, §3, §9). */
import { alnum, isRecord, nowSeconds } from '../core/http.js';
import { type ChatPlan, planChat } from '../gen/text.js';
import type { ReasoningStyle } from '../types.js';
import type { ErrorSpec, ProviderView, Reply, SseEvent } from './types.js';

export interface ChatFlavor {
  provider: ProviderView;
  /** The `model` field of responses. */
  responseModel: string;
  reasoningStyle: ReasoningStyle;
  /** Azure decorations: content-filter results (and async-filter annotation chunks). */
  azure: null | { asyncFilter: boolean; filterCompletion: boolean };
}

/** Common request checks of OpenAI-compatible servers; null when the request is fine. */
export function checkChat(body: unknown, provider: ProviderView, model: string | null): ErrorSpec | null {
  if (!isRecord(body)) return { status: 400, kind: 'bad_request', message: 'Request body must be a JSON object.' };
  if (model === null) return { status: 400, kind: 'bad_request', message: 'Field required: model', param: 'model' };
  if (!provider.hosts(model)) return { status: 404, kind: 'model_not_found', model, param: 'model' };
  if (provider.info(model).kind !== 'chat')
    return { status: 400, kind: 'bad_request', message: `Model ${model} does not support chat completions.`, param: 'model' };
  const messages = body['messages'];
  if (!Array.isArray(messages) || messages.length === 0)
    return { status: 400, kind: 'bad_request', message: 'messages must be a non-empty array', param: 'messages' };
  if (body['stream_options'] !== undefined && body['stream'] !== true) {
    return { status: 400, kind: 'bad_request', message: 'Stream options can only be defined when `stream=True`.', param: 'stream_options' };
  }
  const max = body['max_completion_tokens'] ?? body['max_tokens'];
  if (max !== undefined && max !== null && (typeof max !== 'number' || !Number.isInteger(max) || max < 1)) {
    return { status: 400, kind: 'bad_request', message: 'max_tokens must be a positive integer', param: 'max_tokens' };
  }
  return null;
}

const SAFE = { filtered: false, severity: 'safe' } as const;
const filterResults = (hit = false): Record<string, unknown> => ({
  hate: SAFE,
  self_harm: SAFE,
  sexual: SAFE,
  violence: hit ? { filtered: true, severity: 'medium' } : SAFE,
});
const promptFilter = [{ prompt_index: 0, content_filter_results: { ...filterResults(), jailbreak: { filtered: false, detected: false } } }];

function usageOf(plan: ChatPlan, reasoningTokens: number): Record<string, unknown> {
  return {
    prompt_tokens: plan.promptTokens,
    completion_tokens: plan.completionTokens,
    total_tokens: plan.promptTokens + plan.completionTokens,
    prompt_tokens_details: { cached_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: reasoningTokens },
  };
}

function planFor(body: Record<string, unknown>, f: ChatFlavor, model: string): ChatPlan {
  const max = body['max_completion_tokens'] ?? body['max_tokens'];
  const plan = planChat({
    messages: body['messages'] as unknown[],
    provider: f.provider.id,
    model,
    reasoning: f.provider.info(model).reasoning === true,
    maxTokens: typeof max === 'number' ? max : undefined,
    tools: body['tools'],
    toolChoice: body['tool_choice'],
    responseFormat: body['response_format'],
    stop: body['stop'],
    padTo: f.provider.settings.answerTokens,
  });
  if (f.azure?.filterCompletion && plan.toolCall === null) {
    return { ...plan, content: plan.content.slice(0, Math.ceil(plan.content.length / 2)), finishReason: 'stop' };
  }
  return plan;
}

/** `<think>` style: reasoning becomes part of the content. */
function thinkPieces(plan: ChatPlan): string[] {
  return plan.reasoning.length === 0 ? plan.content : ['<think>\n', ...plan.reasoning, '\n</think>\n\n', ...plan.content];
}

export function chatReply(body: Record<string, unknown>, f: ChatFlavor, model: string): Reply {
  const plan = planFor(body, f, model);
  const style = f.provider.info(model).reasoningStyle ?? f.reasoningStyle;
  const id = `chatcmpl-${alnum(29)}`;
  const created = nowSeconds();
  const finish = f.azure?.filterCompletion && plan.toolCall === null ? 'content_filter' : plan.finishReason;
  const toolCallId = `call_${alnum(24)}`;
  const reasoningTokens = plan.reasoning.length;
  if (body['stream'] === true) return streamReply(body, f, { plan, style, id, created, finish, toolCallId, reasoningTokens });

  const text = style === 'think_tags' ? thinkPieces(plan).join('') : plan.content.join('');
  const message: Record<string, unknown> = { role: 'assistant', content: plan.toolCall && text === '' ? null : text };
  if (plan.reasoning.length > 0 && style !== 'think_tags') {
    message[style === 'reasoning' ? 'reasoning' : 'reasoning_content'] = plan.reasoning.join('');
  }
  if (f.azure) message['refusal'] = null;
  message['tool_calls'] = plan.toolCall
    ? [{ id: toolCallId, type: 'function', function: { name: plan.toolCall.name, arguments: plan.toolCall.arguments } }]
    : f.azure
      ? undefined
      : [];
  const choice: Record<string, unknown> = { index: 0, message, logprobs: null, finish_reason: finish };
  if (f.azure) choice['content_filter_results'] = filterResults(finish === 'content_filter');
  const out: Record<string, unknown> = {
    id,
    object: 'chat.completion',
    created,
    model: f.responseModel,
    choices: [choice],
    usage: usageOf(plan, reasoningTokens),
    system_fingerprint: f.azure ? 'fp_b705f0c291' : null,
  };
  if (f.azure) out['prompt_filter_results'] = promptFilter;
  return { type: 'json', body: out, tokens: plan.completionTokens };
}

interface StreamParts {
  plan: ChatPlan;
  style: ReasoningStyle;
  id: string;
  created: number;
  finish: string;
  toolCallId: string;
  reasoningTokens: number;
}

function streamReply(body: Record<string, unknown>, f: ChatFlavor, p: StreamParts): Reply {
  const opts = body['stream_options'];
  const includeUsage = isRecord(opts) && opts['include_usage'] === true;
  const az = f.azure;
  const chunk = (choice: Record<string, unknown> | null): Record<string, unknown> => {
    const c: Record<string, unknown> = {
      id: p.id,
      object: 'chat.completion.chunk',
      created: p.created,
      model: f.responseModel,
      system_fingerprint: az ? 'fp_b705f0c291' : null,
    };
    c['choices'] = choice === null ? [] : [{ index: 0, logprobs: null, finish_reason: null, ...choice }];
    if (includeUsage) c['usage'] = null;
    return c;
  };
  const delta = (d: Record<string, unknown>): Record<string, unknown> =>
    chunk(az ? { delta: d, content_filter_results: d['role'] ? {} : filterResults() } : { delta: d });

  const events: SseEvent[] = [];
  if (az) events.push({ data: { choices: [], created: 0, id: '', model: '', object: '', prompt_filter_results: promptFilter } });
  events.push({ data: delta({ role: 'assistant', content: '', ...(az ? { refusal: null } : {}) }) });
  const reasoningKey = p.style === 'reasoning' || p.style === 'split' ? 'reasoning' : 'reasoning_content';
  if (p.style !== 'think_tags') for (const r of p.plan.reasoning) events.push({ data: delta({ [reasoningKey]: r }) });
  const content = p.style === 'think_tags' ? thinkPieces(p.plan) : p.plan.content;
  for (const c of content) events.push({ data: delta({ content: c }) });
  const tc = p.plan.toolCall;
  if (tc) {
    events.push({ data: delta({ tool_calls: [{ index: 0, id: p.toolCallId, type: 'function', function: { name: tc.name, arguments: '' } }] }) });
    const third = Math.max(1, Math.ceil(tc.arguments.length / 3));
    for (let i = 0; i < tc.arguments.length; i += third) {
      events.push({ data: delta({ tool_calls: [{ index: 0, function: { arguments: tc.arguments.slice(i, i + third) } }] }) });
    }
  }
  if (az?.asyncFilter) {
    const end = content.join('').length;
    events.push({
      data: chunk({
        content_filter_offsets: { check_offset: 0, start_offset: 0, end_offset: end },
        content_filter_results: filterResults(p.finish === 'content_filter'),
      }),
    });
  }
  const finalChoice: Record<string, unknown> = { delta: {}, finish_reason: p.finish };
  if (az) finalChoice['content_filter_results'] = p.finish === 'content_filter' ? filterResults(true) : {};
  events.push({ data: chunk(finalChoice) });
  if (includeUsage) events.push({ data: { ...chunk(null), usage: usageOf(p.plan, p.reasoningTokens) } });
  return { type: 'sse', events, done: true };
}
