/** Mistral chat completions: 32-hex ids, usage on the last content chunk, thinking chunks, whole tool calls (PROVIDERS §4.3, §3.2, §3.3). */
import { alnum, hex, isRecord, nowSeconds } from '../core/http.js';
import { type ChatPlan, planChat, promptTokens } from '../gen/text.js';
import { semanticChatError, validateChat } from './mistral-validate.js';
import { choiceCount } from './openai-chat.js';
import type { HandlerCtx, Reply, SseEvent } from './types.js';

export function validationReply(issues: unknown[]): Reply {
  return {
    type: 'json',
    status: 422,
    body: { object: 'error', message: { detail: issues }, type: 'invalid_request_error', param: null, code: null },
  };
}

export function mistralChat(ctx: HandlerCtx): Reply {
  const body = ctx.json;
  if (!isRecord(body))
    return validationReply([
      { type: 'model_attributes_type', loc: ['body'], msg: 'Input should be a valid dictionary or object to extract fields from', input: body ?? null },
    ]);
  const issues = validateChat(body);
  if (issues.length > 0) return validationReply(issues);
  const model = ctx.model as string;
  if (!ctx.provider.hosts(model)) return { type: 'error', error: { status: 400, kind: 'model_not_found', model } };
  const info = ctx.provider.info(model);
  if (info.kind !== 'chat') return { type: 'error', error: { status: 400, kind: 'bad_request', message: `Model ${model} does not support chat completions.` } };
  const messages = body['messages'] as unknown[];
  const semantic = semanticChatError(messages);
  if (semantic)
    return { type: 'json', status: 400, body: { object: 'error', message: semantic.message, type: semantic.type, param: null, code: semantic.code } };

  // Mistral's refusal of a prompt over the model's context (code 3051; the cap is not counted), before anything is generated.
  const prompt = promptTokens(messages);
  if (info.contextLength > 0 && prompt > info.contextLength) {
    const message = `Prompt contains ${prompt} tokens and 0 draft tokens, too large for model with ${info.contextLength} maximum context length`;
    const error = { object: 'error', message, type: 'invalid_request_invalid_args', param: null, code: '3051', raw_status_code: 400 };
    return { type: 'json', status: 400, body: error };
  }
  const thinking = info.adjustableReasoning === true && (body['reasoning_effort'] === 'high' || body['prompt_mode'] === 'reasoning');
  // The answer also ends where the model's context does, which Mistral tells apart as `model_length`.
  const cap = typeof body['max_tokens'] === 'number' ? body['max_tokens'] : Number.POSITIVE_INFINITY;
  const room = info.contextLength > 0 ? info.contextLength - prompt : Number.POSITIVE_INFINITY;
  const maxTokens = Math.min(cap, room);
  const plans: ChatPlan[] = [];
  for (let choice = 0; choice < choiceCount(body); choice++) {
    const plan = planChat({
      messages,
      provider: ctx.provider.id,
      model,
      reasoning: thinking,
      maxTokens: Number.isFinite(maxTokens) ? maxTokens : undefined,
      tools: body['tools'],
      toolChoice: body['tool_choice'] === 'any' ? 'required' : body['tool_choice'],
      parallelToolCalls: body['parallel_tool_calls'],
      responseFormat: body['response_format'],
      stop: body['stop'],
      padTo: ctx.provider.settings.answerTokens,
      choice,
    });
    plans.push(room < cap && plan.finishReason === 'length' ? { ...plan, finishReason: 'model_length' } : plan);
  }
  const id = hex(16);
  const created = nowSeconds();
  const prompt0 = (plans[0] as ChatPlan).promptTokens;
  const completion = plans.reduce((n, p) => n + p.completionTokens, 0);
  const usage = { prompt_tokens: prompt0, completion_tokens: completion, total_tokens: prompt0 + completion };
  // Mistral's tool calls carry no `type` (its schema defaults it, and its answers leave it out), streamed or not.
  const choices = plans.map((plan) => ({
    plan,
    toolCalls: plan.toolCalls.length > 0 ? plan.toolCalls.map((tc, index) => ({ id: alnum(9), function: { ...tc }, index })) : null,
  }));
  if (body['stream'] === true) return streamReply({ choices, id, created, model, usage, fragments: ctx.provider.settings.toolCallFragments });

  const out = choices.map(({ plan, toolCalls }, index) => {
    const text = plan.content.join('');
    const content = plan.reasoning.length > 0 ? [thinkChunk(plan.reasoning.join('')), { type: 'text', text }] : text;
    return { index, message: { role: 'assistant', content, tool_calls: toolCalls, prefix: false }, finish_reason: plan.finishReason };
  });
  return { type: 'json', body: { id, object: 'chat.completion', model, usage, created, choices: out }, tokens: completion };
}

const thinkChunk = (text: string): Record<string, unknown> => ({ type: 'thinking', thinking: [{ type: 'text', text }] });

interface StreamInput {
  choices: { plan: ChatPlan; toolCalls: MistralCall[] | null }[];
  id: string;
  created: number;
  model: string;
  usage: Record<string, number>;
  fragments: boolean;
}

interface MistralCall {
  id: string;
  function: { name: string; arguments: string };
  index: number;
}

/**
 * One choice's deltas: thinking arrays, the transition array, plain strings, then its tool calls: each whole in a
 * delta of its own and without `index` (Mistral's API); or, with `fragments`, each as a first fragment with its id,
 * name and wire index, then its arguments in fragments whose id is the placeholder "null" and whose name is empty,
 * told apart only by their `index` (as Mistral streams some models' calls).
 */
function choiceDeltas(plan: ChatPlan, toolCalls: MistralCall[] | null, fragments: boolean): Record<string, unknown>[] {
  const deltas: Record<string, unknown>[] = [];
  for (const r of plan.reasoning) deltas.push({ content: [thinkChunk(r)] });
  const content = [...plan.content];
  if (plan.reasoning.length > 0) {
    const first = content.shift() ?? '';
    deltas.push({
      content: [
        { type: 'thinking', thinking: [], closed: true },
        { type: 'text', text: first },
      ],
    });
  }
  for (const c of content) deltas.push({ content: c });
  for (const { index, ...call } of toolCalls ?? []) {
    if (!fragments) {
      deltas.push({ tool_calls: [call] });
      continue;
    }
    const args = call.function.arguments;
    deltas.push({ tool_calls: [{ id: call.id, function: { name: call.function.name, arguments: '' }, index }] });
    const third = Math.max(1, Math.ceil(args.length / 3));
    for (let i = 0; i < args.length; i += third) {
      deltas.push({ tool_calls: [{ id: 'null', function: { name: '', arguments: args.slice(i, i + third) }, index }] });
    }
  }
  if (deltas.length === 0) deltas.push({ content: '' });
  return deltas;
}

/**
 * Each choice's deltas, interleaved one per choice each round when `n` > 1; a choice's last delta carries its
 * finish_reason, and the stream's very last chunk carries the usage of all choices (earlier chunks `usage: null`).
 */
function streamReply(s: StreamInput): Reply {
  const chunk = (index: number, delta: Record<string, unknown>, finish: string | null = null): Record<string, unknown> => ({
    id: s.id,
    object: 'chat.completion.chunk',
    created: s.created,
    model: s.model,
    choices: [{ index, delta, finish_reason: finish }],
    usage: null,
  });
  const perChoice = s.choices.map(({ plan, toolCalls }) => choiceDeltas(plan, toolCalls, s.fragments));
  const events: SseEvent[] = s.choices.map((_, index) => ({ data: chunk(index, { role: 'assistant', content: '' }) }));
  for (let round = 0; perChoice.some((ds) => round < ds.length); round++) {
    perChoice.forEach((ds, index) => {
      const d = ds[round];
      if (d === undefined) return;
      const finish = round === ds.length - 1 ? (s.choices[index] as StreamInput['choices'][number]).plan.finishReason : null;
      events.push({ data: chunk(index, d, finish) });
    });
  }
  (events[events.length - 1] as { data: Record<string, unknown> }).data['usage'] = s.usage;
  return { type: 'sse', events, done: true };
}
