/** Mistral chat completions: 32-hex ids, usage on the last content chunk, thinking chunks, whole tool calls (PROVIDERS §4.3, §3.2, §3.3). */
import { alnum, hex, isRecord, nowSeconds } from '../core/http.js';
import { type ChatPlan, planChat, promptTokens } from '../gen/text.js';
import { semanticChatError, validateChat } from './mistral-validate.js';
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
  const plan = planChat({
    messages,
    provider: ctx.provider.id,
    model,
    reasoning: thinking,
    maxTokens: typeof body['max_tokens'] === 'number' ? body['max_tokens'] : undefined,
    tools: body['tools'],
    toolChoice: body['tool_choice'] === 'any' ? 'required' : body['tool_choice'],
    responseFormat: body['response_format'],
    stop: body['stop'],
    padTo: ctx.provider.settings.answerTokens,
  });
  const id = hex(16);
  const created = nowSeconds();
  const usage = { prompt_tokens: plan.promptTokens, completion_tokens: plan.completionTokens, total_tokens: plan.promptTokens + plan.completionTokens };
  const toolCalls = plan.toolCall
    ? [{ id: alnum(9), type: 'function', function: { name: plan.toolCall.name, arguments: plan.toolCall.arguments }, index: 0 }]
    : null;
  if (body['stream'] === true) return streamReply({ plan, id, created, model, usage, toolCalls });

  const text = plan.content.join('');
  const content = plan.reasoning.length > 0 ? [thinkChunk(plan.reasoning.join('')), { type: 'text', text }] : text;
  const message = { role: 'assistant', content, tool_calls: toolCalls, prefix: false };
  return {
    type: 'json',
    body: { id, object: 'chat.completion', model, usage, created, choices: [{ index: 0, message, finish_reason: plan.finishReason }] },
    tokens: plan.completionTokens,
  };
}

const thinkChunk = (text: string): Record<string, unknown> => ({ type: 'thinking', thinking: [{ type: 'text', text }] });

interface StreamInput {
  plan: ChatPlan;
  id: string;
  created: number;
  model: string;
  usage: Record<string, number>;
  toolCalls: unknown[] | null;
}

function streamReply(s: StreamInput): Reply {
  const chunk = (delta: Record<string, unknown>, finish: string | null = null, usage: unknown = null): SseEvent => ({
    data: { id: s.id, object: 'chat.completion.chunk', created: s.created, model: s.model, choices: [{ index: 0, delta, finish_reason: finish }], usage },
  });
  const deltas: Record<string, unknown>[] = [];
  for (const r of s.plan.reasoning) deltas.push({ content: [thinkChunk(r)] });
  const content = [...s.plan.content];
  if (s.plan.reasoning.length > 0) {
    const first = content.shift() ?? '';
    deltas.push({
      content: [
        { type: 'thinking', thinking: [], closed: true },
        { type: 'text', text: first },
      ],
    });
  }
  for (const c of content) deltas.push({ content: c });
  if (s.toolCalls) deltas.push({ tool_calls: s.toolCalls });
  if (deltas.length === 0) deltas.push({ content: '' });
  const events: SseEvent[] = [chunk({ role: 'assistant', content: '' })];
  deltas.forEach((d, i) => {
    const last = i === deltas.length - 1;
    events.push(last ? chunk(d, s.plan.finishReason, s.usage) : chunk(d));
  });
  return { type: 'sse', events, done: true };
}
