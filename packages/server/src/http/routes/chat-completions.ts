import { ChatCompletionRequest, ChatCompletionResponse, H } from '@gw/schema';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { GatewayError } from '../../errors/gateway-error.js';
import type { ChatBody, ChatCompletion } from '../../providers/types.js';
import { executePlan } from '../../routing/execute.js';
import { expectedCost, planOffers } from '../../routing/plan.js';
import type { Offer } from '../../routing/registry.js';
import { reserveBudgetWithRateLimit } from '../budget.js';
import { newUsageDraft } from '../context.js';
import { resolveModel, routeOptions } from '../model-access.js';
import { applyRateLimit } from '../plugins/rate-limit.js';
import type { Services } from '../services.js';
import { callUpstream, clientAbortSignal, setRoutingHeaders } from '../upstream-call.js';
import { resumeStream, startStream } from './chat-stream.js';
import type { RouteDocs } from './docs.js';

/**
 * A prompt's size in tokens before the provider counts it: one token per
 * 3 characters of the JSON of the messages and of what the provider puts
 * in the prompt beside them (tool and function definitions, a response
 * schema), which overestimates every tokenizer seen here, so budget holds
 * err on the safe side.
 */
export function estimatePromptTokens(body: { messages: unknown[]; tools?: unknown; functions?: unknown; response_format?: unknown }): number {
  let chars = JSON.stringify(body.messages).length;
  for (const part of [body.tools, body.functions, body.response_format]) if (part !== undefined && part !== null) chars += JSON.stringify(part).length;
  return Math.ceil(chars / 3);
}

export function chatCompletionsRoute(app: FastifyInstance, services: Services, docs: RouteDocs): void {
  app.post<{ Body: ChatCompletionRequest }>(
    '/chat/completions',
    {
      schema: docs.operation('createChatCompletion', 'Chat completion, streaming optional', {
        body: ChatCompletionRequest,
        response: { 200: ChatCompletionResponse },
      }),
      config: { limitWithBudgetHold: true },
    },
    async (request: FastifyRequest<{ Body: ChatCompletionRequest }>, reply: FastifyReply) => {
      const body = request.body as ChatBody & ChatCompletionRequest;
      const found = resolveModel(services, request, body.model, 'chat');
      const model = found instanceof Promise ? await found : found;
      checkRequestCoherence(body);
      const cap = completionCap(body);
      if (cap !== undefined && cap.tokens > model.context_window) {
        const message = `'${cap.field}' is ${cap.tokens}, more than the ${model.context_window}-token context window of '${model.id}'.`;
        throw new GatewayError('validation', message, { param: cap.field });
      }
      // Recorded from here on: a request refused above for its body is not (docs/decisions.md, usage records).
      request.gw.usage = newUsageDraft('chat', model.id);
      request.gw.outlivesClient = body.stream === true && request.headers[H.idempotencyKey] !== undefined;
      const lastEventId = request.headers['last-event-id'];
      if (body.stream === true && typeof lastEventId === 'string' && lastEventId !== '') {
        await applyRateLimit(request, reply);
        return resumeStream(services, request, reply, lastEventId, body);
      }
      const options = routeOptions(services, request);
      const promptTokens = estimatePromptTokens(body);
      // Without a cap the completion can fill the rest of the context window: that is its worst case, for each of the `n` choices.
      const size = { promptTokens, maxTokens: (cap?.tokens ?? Math.max(1, model.context_window - promptTokens)) * (body.n ?? 1) };
      const plan = planOffers(model, options, size);
      await reserveBudgetWithRateLimit(services, request, reply, Math.max(0, ...plan.map((o) => expectedCost(o, size))));
      if (body.stream === true) return startStream(services, request, reply, { body, plan, options, promptTokens, completionCap: size.maxTokens });
      const signal = clientAbortSignal(reply);
      const result = await executePlan(plan, (offer: Offer) =>
        callUpstream(services, request, offer, (adapter) => adapter.chat(body, { upstreamModel: offer.upstreamModel, signal, requestId: request.id })),
      );
      const completion: ChatCompletion = { ...result.value, model: model.id };
      bill(request, result.offer, completion);
      setRoutingHeaders(reply, request, result.offer, options.strategy, result.hops);
      return completion;
    },
  );
}

/** The completion's cap as the client set it: `max_tokens`, else OpenAI's newer `max_completion_tokens`. */
function completionCap(body: ChatCompletionRequest): { field: 'max_tokens' | 'max_completion_tokens'; tokens: number } | undefined {
  if (body.max_tokens !== undefined) return { field: 'max_tokens', tokens: body.max_tokens };
  if (body.max_completion_tokens !== undefined) return { field: 'max_completion_tokens', tokens: body.max_completion_tokens };
  return undefined;
}

/**
 * What OpenAI refuses with a 400 and a provider might instead ignore (so a
 * request would work or not depending on where it was routed):
 * `stream_options` without a stream, and a `tool_choice` that names no
 * tool the request gives.
 */
function checkRequestCoherence(body: ChatCompletionRequest): void {
  if (body.stream !== true && body.stream_options !== undefined && body.stream_options !== null) {
    throw new GatewayError('validation', "Invalid body: 'stream_options' is only allowed when 'stream' is true.", { param: 'stream_options' });
  }
  const choice = body.tool_choice;
  if (choice === undefined || choice === 'none' || choice === 'auto') return;
  const names = (body.tools ?? []).map((t) => t.function.name);
  if (names.length === 0) {
    throw new GatewayError('validation', "Invalid body: 'tool_choice' asks for a tool call, but 'tools' gives none.", { param: 'tool_choice' });
  }
  if (typeof choice === 'object' && !names.includes(choice.function.name)) {
    const param = 'tool_choice.function.name';
    throw new GatewayError('validation', `Invalid body: '${param}' names '${choice.function.name}', which is not among 'tools' (${names.join(', ')}).`, {
      param,
    });
  }
}

function bill(request: FastifyRequest, offer: Offer, completion: ChatCompletion): void {
  const usage = request.gw.usage;
  if (!usage) return;
  const prompt = completion.usage?.prompt_tokens ?? 0;
  const done = completion.usage?.completion_tokens ?? 0;
  usage.provider = offer.provider;
  usage.promptTokens = prompt;
  usage.completionTokens = done;
  usage.cost = (prompt * offer.pricing.prompt_per_1m + done * offer.pricing.completion_per_1m) / 1_000_000;
}
