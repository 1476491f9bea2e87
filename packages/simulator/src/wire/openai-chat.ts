/** OpenAI-compatible chat completions (vLLM-style hosts and Azure), non-streaming and SSE (PROVIDERS §1.1, §3, §9). */
import { alnum, isRecord, nowSeconds } from '../core/http.js';
import { MAX_TOP_LOGPROBS, type TokenLogprob, tokenLogprobs } from '../gen/logprobs.js';
import { type ChatPlan, planChat, promptTokens } from '../gen/text.js';
import type { ReasoningStyle } from '../types.js';
import type { ErrorSpec, ProviderView, Reply, SseEvent } from './types.js';

export interface ChatFlavor {
  provider: ProviderView;
  /** The `model` field of responses. */
  responseModel: string;
  reasoningStyle: ReasoningStyle;
  /** Azure decorations: content-filter results (and async-filter annotation chunks). */
  azure: null | { asyncFilter: boolean; filterCompletion: boolean };
  /** A vLLM server (Scaleway, OVHcloud, Nebius): its message model has `refusal`, answered null. */
  vllm?: boolean;
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
  return overContext(messages, typeof max === 'number' ? max : 0, provider.info(model).contextLength);
}

/** vLLM's refusal (OpenAI's words are alike) of a prompt and cap that do not fit the model's context: nothing is generated or billed. */
function overContext(messages: unknown[], cap: number, context: number): ErrorSpec | null {
  const prompt = promptTokens(messages);
  if (context <= 0 || prompt + cap <= context) return null;
  const message = `This model's maximum context length is ${context} tokens. However, you requested ${prompt + cap} tokens (${prompt} in the messages, ${cap} in the completion). Please reduce the length of the messages or completion.`;
  return { status: 400, kind: 'bad_request', message, param: 'messages' };
}

/** vLLM's and OpenAI's checks of `top_logprobs`: an integer up to 20, and only with `logprobs: true` (after a host's own refusals). */
function checkLogprobs(body: Record<string, unknown>): ErrorSpec | null {
  const top = body['top_logprobs'];
  if (top === undefined || top === null) return null;
  if (typeof top !== 'number' || !Number.isInteger(top) || top < 0 || top > MAX_TOP_LOGPROBS) {
    return { status: 400, kind: 'bad_request', message: `top_logprobs must be an integer between 0 and ${MAX_TOP_LOGPROBS}`, param: 'top_logprobs' };
  }
  if (body['logprobs'] !== true) {
    return { status: 400, kind: 'bad_request', message: 'when using `top_logprobs`, `logprobs` must be set to true.', param: 'top_logprobs' };
  }
  return null;
}

/** How many alternatives each token's logprobs list, or null when the request asks for no logprobs. */
function logprobsAsked(body: Record<string, unknown>): number | null {
  if (body['logprobs'] !== true) return null;
  const top = body['top_logprobs'];
  return typeof top === 'number' ? top : 0;
}

const SAFE = { filtered: false, severity: 'safe' } as const;
const filterResults = (hit = false): Record<string, unknown> => ({
  hate: SAFE,
  self_harm: SAFE,
  sexual: SAFE,
  violence: hit ? { filtered: true, severity: 'medium' } : SAFE,
});
const promptFilter = [{ prompt_index: 0, content_filter_results: { ...filterResults(), jailbreak: { filtered: false, detected: false } } }];

function usageOf(plans: ChatPlan[]): Record<string, unknown> {
  const prompt = (plans[0] as ChatPlan).promptTokens;
  const completion = plans.reduce((n, p) => n + p.completionTokens, 0);
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: { cached_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: plans.reduce((n, p) => n + p.reasoning.length, 0) },
  };
}

/**
 * How many choices the request asks for: vLLM, Azure and Mistral answer `n` of them (Scaleway and Cohere refuse `n`,
 * before this); the cap only keeps a runaway request small.
 */
export function choiceCount(body: Record<string, unknown>): number {
  const n = body['n'];
  return typeof n === 'number' && Number.isInteger(n) && n >= 1 ? Math.min(n, 128) : 1;
}

function planFor(body: Record<string, unknown>, f: ChatFlavor, model: string, choice: number): ChatPlan {
  const max = body['max_completion_tokens'] ?? body['max_tokens'];
  const info = f.provider.info(model);
  const messages = body['messages'] as unknown[];
  // Without a cap the answer may take what the context leaves (vLLM's default max_tokens, OpenAI's alike): `length` there.
  const room = info.contextLength > 0 ? info.contextLength - promptTokens(messages) : undefined;
  const plan = planChat({
    messages,
    provider: f.provider.id,
    model,
    reasoning: info.reasoning === true,
    maxTokens: typeof max === 'number' ? max : room,
    tools: body['tools'],
    toolChoice: body['tool_choice'],
    parallelToolCalls: body['parallel_tool_calls'],
    responseFormat: body['response_format'],
    stop: body['stop'],
    padTo: f.provider.settings.answerTokens,
    choice,
  });
  if (f.azure?.filterCompletion && plan.toolCalls.length === 0) {
    return { ...plan, content: plan.content.slice(0, Math.ceil(plan.content.length / 2)), finishReason: 'stop' };
  }
  return plan;
}

/** `<think>` style: reasoning becomes part of the content. */
function thinkPieces(plan: ChatPlan): string[] {
  return plan.reasoning.length === 0 ? plan.content : ['<think>\n', ...plan.reasoning, '\n</think>\n\n', ...plan.content];
}

/** One of the answer's choices: its plan, how it ends, its tool calls' ids, and its content tokens' logprobs when asked. */
interface ChoicePlan {
  plan: ChatPlan;
  finish: string;
  toolCallIds: string[];
  logprobs: TokenLogprob[] | null;
}

export function chatReply(body: Record<string, unknown>, f: ChatFlavor, model: string): Reply {
  const badLogprobs = checkLogprobs(body);
  if (badLogprobs) return { type: 'error', error: badLogprobs };
  const style = f.provider.info(model).reasoningStyle ?? f.reasoningStyle;
  const top = logprobsAsked(body);
  const choices: ChoicePlan[] = [];
  for (let i = 0; i < choiceCount(body); i++) {
    const plan = planFor(body, f, model, i);
    const finish = f.azure?.filterCompletion && plan.toolCalls.length === 0 ? 'content_filter' : plan.finishReason;
    const logprobs = top === null ? null : tokenLogprobs(contentPieces(plan, style), top);
    choices.push({ plan, finish, toolCallIds: plan.toolCalls.map(() => `call_${alnum(24)}`), logprobs });
  }
  const id = `chatcmpl-${alnum(29)}`;
  const created = nowSeconds();
  const plans = choices.map((c) => c.plan);
  const tokens = plans.reduce((n, p) => n + p.completionTokens, 0);
  if (body['stream'] === true) return streamReply(body, f, { choices, style, id, created, tokens });

  const out: Record<string, unknown> = {
    id,
    object: 'chat.completion',
    created,
    model: f.responseModel,
    choices: choices.map((c, index) => wholeChoice(c, index, style, f)),
    usage: usageOf(plans),
    system_fingerprint: f.azure ? 'fp_b705f0c291' : null,
  };
  if (f.azure) out['prompt_filter_results'] = promptFilter;
  return { type: 'json', body: out, tokens };
}

/** The pieces the answer's content is made of, each one token: what its logprobs are of. */
function contentPieces(plan: ChatPlan, style: ReasoningStyle): string[] {
  return style === 'think_tags' ? thinkPieces(plan) : plan.content;
}

/** A choice's `logprobs` object: OpenAI's (Azure's) has a `refusal` list beside `content`, vLLM's only `content`. */
function logprobsObject(content: TokenLogprob[], f: ChatFlavor): Record<string, unknown> {
  return f.azure ? { content, refusal: null } : { content };
}

function wholeChoice({ plan, finish, toolCallIds, logprobs }: ChoicePlan, index: number, style: ReasoningStyle, f: ChatFlavor): Record<string, unknown> {
  const text = contentPieces(plan, style).join('');
  const message: Record<string, unknown> = { role: 'assistant', content: plan.toolCalls.length > 0 && text === '' ? null : text };
  if (f.vllm) message['refusal'] = null;
  if (plan.reasoning.length > 0 && style !== 'think_tags') {
    message[style === 'reasoning' ? 'reasoning' : 'reasoning_content'] = plan.reasoning.join('');
  }
  if (f.azure) message['refusal'] = null;
  message['tool_calls'] =
    plan.toolCalls.length > 0
      ? plan.toolCalls.map((tc, i) => ({ id: toolCallIds[i], type: 'function', function: { name: tc.name, arguments: tc.arguments } }))
      : f.azure
        ? undefined
        : [];
  const choice: Record<string, unknown> = { index, message, logprobs: logprobs ? logprobsObject(logprobs, f) : null, finish_reason: finish };
  if (f.azure) choice['content_filter_results'] = filterResults(finish === 'content_filter');
  return choice;
}

interface StreamParts {
  choices: ChoicePlan[];
  style: ReasoningStyle;
  id: string;
  created: number;
  tokens: number;
}

function streamReply(body: Record<string, unknown>, f: ChatFlavor, p: StreamParts): Reply {
  const opts = body['stream_options'];
  const includeUsage = isRecord(opts) && opts['include_usage'] === true;
  const az = f.azure;
  const chunk = (choice: Record<string, unknown> | null, index = 0): Record<string, unknown> => {
    const c: Record<string, unknown> = {
      id: p.id,
      object: 'chat.completion.chunk',
      created: p.created,
      model: f.responseModel,
      system_fingerprint: az ? 'fp_b705f0c291' : null,
    };
    c['choices'] = choice === null ? [] : [{ index, logprobs: null, finish_reason: null, ...choice }];
    if (includeUsage) c['usage'] = null;
    return c;
  };
  const delta = ({ delta: d, logprob }: ChoiceDelta, index: number): Record<string, unknown> =>
    chunk(
      {
        delta: d,
        ...(az ? { content_filter_results: d['role'] ? {} : filterResults() } : {}),
        ...(logprob ? { logprobs: logprobsObject([logprob], f) } : {}),
      },
      index,
    );

  const events: SseEvent[] = [];
  if (az) events.push({ data: { choices: [], created: 0, id: '', model: '', object: '', prompt_filter_results: promptFilter } });
  // Each choice's deltas in order; with n > 1 they are interleaved, one chunk per choice each round, as vLLM sends them.
  const perChoice = p.choices.map((c, index) => choiceDeltas(c, p.style, az !== null).map((d) => ({ data: delta(d, index) })));
  for (let round = 0; perChoice.some((ds) => round < ds.length); round++) {
    for (const ds of perChoice) if (round < ds.length) events.push(ds[round] as SseEvent);
  }
  p.choices.forEach((c, index) => {
    if (az?.asyncFilter) {
      const end = (p.style === 'think_tags' ? thinkPieces(c.plan) : c.plan.content).join('').length;
      events.push({
        data: chunk(
          {
            content_filter_offsets: { check_offset: 0, start_offset: 0, end_offset: end },
            content_filter_results: filterResults(c.finish === 'content_filter'),
          },
          index,
        ),
      });
    }
  });
  p.choices.forEach((c, index) => {
    const finalChoice: Record<string, unknown> = { delta: {}, finish_reason: c.finish };
    if (az) finalChoice['content_filter_results'] = c.finish === 'content_filter' ? filterResults(true) : {};
    events.push({ data: chunk(finalChoice, index) });
  });
  if (includeUsage) events.push({ data: { ...chunk(null), usage: usageOf(p.choices.map((c) => c.plan)) } });
  return { type: 'sse', events, done: true };
}

/** One streamed delta, and the logprob of the content token it carries when logprobs were asked. */
interface ChoiceDelta {
  delta: Record<string, unknown>;
  logprob?: TokenLogprob | undefined;
}

/**
 * One choice's deltas: its role, its reasoning, its content (one token each, with its logprob), then each tool call in
 * fragments keyed by its index, the first with its id, type and name (OpenAI's and vLLM's form).
 */
function choiceDeltas({ plan, toolCallIds, logprobs }: ChoicePlan, style: ReasoningStyle, azure: boolean): ChoiceDelta[] {
  const deltas: ChoiceDelta[] = [];
  const add = (delta: Record<string, unknown>, logprob?: TokenLogprob): void => {
    deltas.push({ delta, logprob });
  };
  add({ role: 'assistant', content: '', ...(azure ? { refusal: null } : {}) });
  const reasoningKey = style === 'reasoning' || style === 'split' ? 'reasoning' : 'reasoning_content';
  if (style !== 'think_tags') for (const r of plan.reasoning) add({ [reasoningKey]: r });
  const pieces = contentPieces(plan, style);
  for (let i = 0; i < pieces.length; i++) add({ content: pieces[i] }, logprobs?.[i]);
  plan.toolCalls.forEach((tc, index) => {
    add({ tool_calls: [{ index, id: toolCallIds[index], type: 'function', function: { name: tc.name, arguments: '' } }] });
    const third = Math.max(1, Math.ceil(tc.arguments.length / 3));
    for (let i = 0; i < tc.arguments.length; i += third) {
      add({ tool_calls: [{ index, function: { arguments: tc.arguments.slice(i, i + third) } }] });
    }
  });
  return deltas;
}
