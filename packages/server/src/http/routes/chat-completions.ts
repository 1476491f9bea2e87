import { ChatCompletionRequest, ChatCompletionResponse, H, NULLABLE_CHAT_FIELDS } from '@gw/schema';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { GatewayError, isGatewayError } from '../../errors/gateway-error.js';
import { asWritten, type ExactInteger } from '../../lib/json-numbers.js';
import { withoutKnownSecrets } from '../../lib/redact.js';
import { toFunctionsChoice, toToolsApi } from '../../providers/legacy-functions.js';
import { saysNothing } from '../../providers/openai-shape.js';
import type { ChatBody, ChatCompletion } from '../../providers/types.js';
import { estimatedUsage, generatedChars, usageAtMost } from '../../providers/usage-estimate.js';
import { executePlan } from '../../routing/execute.js';
import { offersTakingFields } from '../../routing/param-routing.js';
import { expectedCost, heldCost, planOffers } from '../../routing/plan.js';
import type { Offer, RegistryModel } from '../../routing/registry.js';
import { heldFor, reserveBudgetWithRateLimit } from '../budget.js';
import { newUsageDraft } from '../context.js';
import { resolveModel, routeOptions } from '../model-access.js';
import { applyRateLimit } from '../plugins/rate-limit.js';
import { billedCompletionTokens } from '../plugins/usage-recording.js';
import { promptMedia, withoutInlineMedia } from '../prompt-media.js';
import type { Services } from '../services.js';
import { callUpstream, clientAbortSignal, setRoutingHeaders } from '../upstream-call.js';
import { billedPromptTokens } from '../usage-bounds.js';
import { resumeStream, startStream } from './chat-stream.js';
import type { RouteDocs } from './docs.js';

/**
 * A prompt's size in tokens before the provider counts it: one token per
 * 3 characters of the JSON of the messages and of what the provider puts
 * in the prompt beside them (tool and function definitions, a response
 * schema), which overestimates every tokenizer seen here, so budget holds
 * err on the safe side; and for media parts what the provider counts for
 * them (prompt-media.ts: an image, a second of audio, a document's page),
 * whether given by URL (a short string, but the provider counts the whole
 * image) or inline. Inline media's base64 is not counted as characters: a
 * 3 MB image held about a million tokens, a few seconds of WAV a hundred
 * thousand, and serialising it only to measure it took the event loop
 * about 30 ms per 4 MB.
 */
export function estimatePromptTokens(body: { messages: unknown[]; tools?: unknown; functions?: unknown; response_format?: unknown }): number {
  const media = promptMedia(body.messages);
  let chars = (media?.inline === true ? JSON.stringify(body.messages, withoutInlineMedia) : JSON.stringify(body.messages)).length;
  for (const part of [body.tools, body.functions, body.response_format]) if (part !== undefined && part !== null) chars += JSON.stringify(part).length;
  return Math.ceil(chars / 3) + (media?.tokens ?? 0);
}

export function chatCompletionsRoute(app: FastifyInstance, services: Services, docs: RouteDocs): void {
  app.post<{ Body: ChatCompletionRequest }>(
    '/chat/completions',
    {
      schema: docs.operation('createChatCompletion', 'Chat completion, streaming optional', {
        body: ChatCompletionRequest,
        response: { 200: ChatCompletionResponse },
      }),
      config: { limitWithBudgetHold: true, usageKind: 'chat' },
      // A provider key a provider echoed into its answer does not reach the client (lib/redact.ts).
      serializerCompiler: () => completionJson,
    },
    async (request: FastifyRequest<{ Body: ChatCompletionRequest }>, reply: FastifyReply) => {
      const body = request.body as ChatBody & ChatCompletionRequest;
      const seen = dropNullFields(body);
      const lastEventId = request.headers['last-event-id'];
      const resume = body.stream === true && typeof lastEventId === 'string' && lastEventId !== '';
      let model: RegistryModel;
      try {
        const found = resolveModel(services, request, body.model, 'chat');
        model = found instanceof Promise ? await found : found;
      } catch (refusal) {
        // A stream begun before its model left the registry (its last offer dropped at a rebuild) or its key's workspace
        // (enabledModels) runs on and is billed: its key may still resume it, as it replays a keyed answer. Any other
        // request naming the model is refused as before.
        if (resume && (services.registry.get(body.model) === undefined || (isGatewayError(refusal) && refusal.code === 'model_not_found')))
          return resumeStream(services, request, reply, lastEventId, body, resolvedId(services, body.model), { refusal });
        throw refusal;
      }
      if (request.gw.exactIntegers !== null) passIntegersAsWritten(body, request.gw.exactIntegers);
      refuseProviderActions(body);
      checkRequestCoherence(body);
      // OpenAI's deprecated functions API goes to every provider as its tools API; answered as asked (legacy-functions.ts).
      const functions = body['functions'] !== undefined;
      if (functions || (seen & FUNCTION_MESSAGES) !== 0 || body['function_call'] !== undefined) toToolsApi(body);
      if (body.tools?.length === 0) dropEmptyTools(body);
      const cap = completionCap(body);
      if (cap !== undefined && cap.tokens > model.context_window) {
        const message = `'${cap.field}' is ${cap.tokens}, more than the ${model.context_window}-token context window of '${model.id}'.`;
        throw new GatewayError('validation', message, { param: cap.field });
      }
      // Recorded from here on: a request refused above for its body is not (docs/decisions.md, usage records).
      request.gw.usage = newUsageDraft('chat', model.id);
      // A stream refused or failed before its first event is recorded as the stream it was asked to be.
      if (body.stream === true) request.gw.usage.streamed = true;
      // With an idempotency key it runs on when its client leaves (the retry gets its answer); set before the hold for the same reason.
      request.gw.outlivesClient = request.headers[H.idempotencyKey] !== undefined;
      if (resume) {
        await applyRateLimit(request, reply);
        return resumeStream(services, request, reply, lastEventId, body, model.id);
      }
      const options = routeOptions(services, request);
      const promptTokens = estimatePromptTokens(body);
      // Without a cap a completion can fill the context window less the prompt as the provider counts it, which the
      // estimate may exceed: the hold takes the whole window (the worst case whatever that count), each of the `n`
      // choices, and the bill what the provider's count leaves. A provider that needs a cap is asked for the rest.
      const perChoice = cap?.tokens ?? Math.max(1, model.context_window - promptTokens);
      const choices = body.n ?? 1;
      const size = { promptTokens, maxTokens: (cap?.tokens ?? model.context_window) * choices };
      const billedCap = (prompt: number) => (cap?.tokens ?? Math.max(1, model.context_window - prompt)) * choices;
      // Offers whose provider refuses an answer-changing field the request uses are left out (never attempted).
      const servable = modelWithOffersTakingFields(services, request, model, body, options.pin, (seen & AFTER_TOOL) !== 0);
      // `cheapest` weighs what the completion can be, the rest of the window (docs/routing.md), not the hold's whole
      // window: priced at the whole window, a long prompt's cost was all but ignored beside a completion it leaves no room for.
      const plan = planOffers(servable, options, cap === undefined ? { promptTokens, maxTokens: perChoice * choices } : size);
      const holdCost = (o: Offer) => expectedCost(o, size);
      try {
        await reserveBudgetWithRateLimit(services, request, reply, heldCost(plan, options.maxHops, holdCost));
      } catch (err) {
        // Without a cap the hold prices a completion that fills the context window: say how to ask for less.
        if (cap === undefined && isGatewayError(err) && err.code === 'budget_exceeded') {
          err.message += ` This request sets no max_tokens, so its worst case is a completion filling the ${model.context_window}-token context window; a max_tokens lowers it.`;
        }
        throw err;
      }
      if (body.stream === true) {
        const stream = {
          body,
          plan,
          holdCost,
          offers: servable.offers,
          options,
          promptTokens,
          billedCap,
          perChoice,
          choices,
          functions,
        };
        return startStream(services, request, reply, stream);
      }
      const outlives = request.gw.outlivesClient;
      const signal = clientAbortSignal(services, reply, !outlives);
      let result: Awaited<ReturnType<typeof executePlan<ChatCompletion>>>;
      try {
        result = await executePlan(
          plan,
          (offer: Offer) =>
            callUpstream(
              services,
              request,
              offer,
              (adapter) => adapter.chat(body, { upstreamModel: offer.upstreamModel, signal, requestId: request.id, maxTokens: perChoice }),
              perChoice * choices,
            ),
          { health: options.stats, offers: servable.offers, pin: options.pin, maxHops: options.maxHops, cost: heldFor(request, holdCost) },
        );
      } finally {
        // Only a signal that outlives its client stays among the waiting calls until disarmed; the others leave at 'close'.
        if (outlives) signal.disarm();
      }
      const completion: ChatCompletion = { ...result.value, model: model.id };
      // A provider that reported no usage: answered and billed at the gateway's estimate, as a stream is.
      completion.usage ??= estimatedUsage(promptTokens, answeredChars(completion), billedCap(promptTokens));
      // The provider's prompt count, at most what the request's bytes could tokenize into (usage-bounds.ts).
      const prompt = billedPromptTokens(request.log, result.offer.provider, completion.usage.prompt_tokens, request.gw.bodyBytes, body);
      bill(request, result.offer, completion, prompt, billedCap(prompt));
      setRoutingHeaders(reply, request, result.offer, options.strategy, result.hops);
      if (functions) completion.choices = completion.choices.map(toFunctionsChoice);
      return completion;
    },
  );
}

/** A completion as sent: serialised, with any registered secret taken out. */
function completionJson(data: unknown): string {
  return withoutKnownSecrets(JSON.stringify(data));
}

/**
 * The model `id` names as the registry reads it, for a model it may no longer serve: the configured one (`:eu` or
 * not), else the id without `:eu` (no model here has it).
 */
function resolvedId(services: Services, id: string): string {
  return services.registry.configuredId(id) ?? (id.endsWith(':eu') ? id.slice(0, -3) : id);
}

/** What dropNullFields tells of the messages: one is of the functions API (an assistant's `function_call`, a `function` message). */
const FUNCTION_MESSAGES = 1;
/** A message other than the assistant's (one that says something) or another result follows a tool (or function) result: Mistral refuses it (param-compat.ts). */
const AFTER_TOOL = 2;

/**
 * A null where OpenAI takes one (`temperature: null`, `max_tokens: null`) means the field was not given: it is left
 * out here, so that neither the checks below nor a provider (some refuse a null) see it. Returns what it saw of the
 * messages (FUNCTION_MESSAGES, AFTER_TOOL), told here to spare another walk of them.
 */
function dropNullFields(body: Record<string, unknown>): number {
  // The body's few keys walked rather than the list's many looked up: the set is asked only about a null.
  // Set undefined rather than deleted: JSON leaves it out, and the body keeps its shape.
  for (const field in body) if (body[field] === null && NULLABLE.has(field)) body[field] = undefined;
  // An assistant message read back from an answer (Python's `model_dump()`, LiteLLM) says `tool_calls: null` and
  // `function_call: null`: no calls, as OpenAI takes it; some hosts fail on the null. Others (a vLLM answer, an SDK's
  // parse helper) say `tool_calls: []`, the same, which OpenAI's API (Azure's) refuses (400 `empty_array`), as do
  // some open-weight hosts: left out alike, for every provider.
  let seen = 0;
  let afterResult = false;
  for (const message of body['messages'] as Record<string, unknown>[]) {
    const calls = message['tool_calls'];
    if (calls === null || (Array.isArray(calls) && calls.length === 0)) message['tool_calls'] = undefined;
    const role = message['role'];
    const call = message['function_call'];
    if (call === null) message['function_call'] = undefined;
    else if (call !== undefined || role === 'function') seen |= FUNCTION_MESSAGES;
    // A `function` result is sent as a tool result (legacy-functions.ts).
    const result = role === 'tool' || role === 'function';
    if (afterResult && !result && role !== 'assistant') seen |= AFTER_TOOL;
    // An assistant message that says nothing (reasoning alone) is left out by Mistral's adapter: the result stays last.
    if (!(afterResult && role === 'assistant' && message['function_call'] === undefined && saysNothing(message))) afterResult = result;
  }
  return seen;
}

const NULLABLE: ReadonlySet<string> = new Set(NULLABLE_CHAT_FIELDS);

/**
 * The model with only the offers that take every field the request uses. A request no offer takes is refused for its body (a 400): like
 * any body refused, it reached no provider and no budget, and is not recorded (docs/decisions.md, usage records).
 */
function modelWithOffersTakingFields(
  services: Services,
  request: FastifyRequest,
  model: RegistryModel,
  body: ChatBody,
  pin: string | null,
  afterTool: boolean,
): RegistryModel {
  try {
    return offersTakingFields(model, body, services.adapters, pin, afterTool);
  } catch (err) {
    request.gw.usage = null;
    throw err;
  }
}

/**
 * The completion's cap as the client set it: `max_tokens` or OpenAI's newer `max_completion_tokens`; with both,
 * the larger, since hosts differ in which one they honour (SGLang and vLLM take `max_completion_tokens` first).
 */
function completionCap(body: ChatCompletionRequest): { field: 'max_tokens' | 'max_completion_tokens'; tokens: number } | undefined {
  const { max_tokens: old, max_completion_tokens: current } = body;
  if (current != null && (old == null || current > old)) return { field: 'max_completion_tokens', tokens: current };
  if (old != null) return { field: 'max_tokens', tokens: old };
  return undefined;
}

/**
 * Fields that would have a provider act beyond answering, with the gateway's account and on the servers all its
 * clients share: refused before any call, whichever provider would serve it (its other fields pass as sent).
 */
function refuseProviderActions(body: ChatBody): void {
  // Azure's "On Your Data": Azure would search the index or database it names with the gateway's Azure identity
  // (its managed identity reads the operator's own indexes) and call embedding deployments the usage does not count.
  // OpenAI's API refuses the argument; no other provider knows it.
  if (body['data_sources'] != null) {
    throw new GatewayError('validation', "Invalid body: 'data_sources' (Azure OpenAI On Your Data) is not supported.", { param: 'data_sources' });
  }
  // A Jinja template of the client's, which vLLM and SGLang render on the provider's servers (alone, or in
  // `chat_template_kwargs`): one that loops for minutes holds the server every client of the gateway shares, which is
  // why both refuse it unless told to trust their clients. The template is the provider's; other kwargs pass.
  if (body['chat_template'] != null) {
    throw new GatewayError('validation', "Invalid body: 'chat_template' is not supported: the model's own template is used.", { param: 'chat_template' });
  }
  // vLLM's disaggregated serving reads where to fetch a prompt's KV cache from the request (a remote host and port):
  // a client's would have the provider's servers connect where it says. Only the provider's own proxy sets it.
  if (body['kv_transfer_params'] != null) {
    throw new GatewayError('validation', "Invalid body: 'kv_transfer_params' is not supported: it is the provider's own.", { param: 'kv_transfer_params' });
  }
  const kwargs = body['chat_template_kwargs'];
  if (kwargs != null && typeof kwargs === 'object' && (kwargs as Record<string, unknown>)['chat_template'] != null) {
    const param = 'chat_template_kwargs.chat_template';
    throw new GatewayError('validation', `Invalid body: '${param}' is not supported: the model's own template is used.`, { param });
  }
}

/**
 * What OpenAI refuses with a 400 and a provider might instead ignore (so a
 * request would work or not depending on where it was routed):
 * `stream_options` without a stream, `parallel_tool_calls` without tools,
 * and a `tool_choice` that names no tool the request gives.
 */
function checkRequestCoherence(body: ChatBody & ChatCompletionRequest): void {
  // An end of int64 written as no integer (9223372036854775807.0) would be written to the provider past int64, which vLLM hosts refuse.
  if (body.seed === INT64_END || body.seed === -INT64_END) body.seed = Math.sign(body.seed) * INT64_WITHIN;
  if (body.stream !== true && body.stream_options !== undefined && body.stream_options !== null) {
    throw new GatewayError('validation', "Invalid body: 'stream_options' is only allowed when 'stream' is true.", { param: 'stream_options' });
  }
  // Alternatives without `logprobs: true`: OpenAI's and vLLM's 400, where other hosts ignore them, so refused here for
  // every route. A count of 0 asks for nothing (a neutral value, docs/adapters.md): it counts as absent and is not
  // sent, since vLLM refuses even that without `logprobs: true`.
  const top = body['top_logprobs'];
  if (top !== undefined && body['logprobs'] !== true) {
    if (top === 0) body['top_logprobs'] = undefined;
    else throw new GatewayError('validation', "Invalid body: 'top_logprobs' is only allowed when 'logprobs' is true.", { param: 'top_logprobs' });
  }
  // OpenAI's 400 where other hosts ignore it. The functions API's `functions` count as tools: they are sent as tools.
  if (body['parallel_tool_calls'] !== undefined && !(body.tools?.length || (body['functions'] as unknown[] | undefined)?.length)) {
    throw new GatewayError('validation', "Invalid body: 'parallel_tool_calls' is only allowed when 'tools' are given.", { param: 'parallel_tool_calls' });
  }
  const choice = body.tool_choice;
  if (choice == null || choice === 'none' || choice === 'auto') return;
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

/**
 * `tools: []` (or `functions: []`, sent as tools) gives no tool: as absent, it is not sent. OpenAI's API (Azure's) refuses
 * the empty list (400 `empty_array`, "[] is too short - 'tools'") where vLLM hosts and Mistral take it, so the request
 * worked or not depending on where it was routed. A `tool_choice` of `auto` or `none` then asks nothing and goes with it.
 */
function dropEmptyTools(body: ChatBody & ChatCompletionRequest): void {
  body.tools = undefined;
  if (body.tool_choice === 'auto' || body.tool_choice === 'none') body.tool_choice = undefined;
}

/** 2^63: int64's ends as a double reads them (schema's `seed`). */
const INT64_END = 2 ** 63;
/** The double nearest 2^63 within int64, written as 9223372036854775000. */
const INT64_WITHIN = 2 ** 63 - 1024;

/**
 * Integers past 2^53, checked by the schema as the doubles JSON reads, sent to the provider as the client wrote them
 * (docs/decisions.md, numbers): in a tool's or a response format's schema, a provider's own field, and `seed`, which
 * int64 must hold (JSON read 2^63 and one past int64 alike). The chat's other fields are read here as numbers.
 */
function passIntegersAsWritten(body: ChatBody & ChatCompletionRequest, integers: readonly ExactInteger[]): void {
  for (const { holder, key, source } of integers) {
    if (holder !== body) holder[key] = asWritten(source);
    else if (key === 'seed') body.seed = exactSeed(source);
    else if (!CHAT_FIELDS.has(key)) holder[key] = asWritten(source);
  }
}

const CHAT_FIELDS: ReadonlySet<string> = new Set(Object.keys(ChatCompletionRequest.properties));

/** A seed as written, where int64 holds it (the adapters pass it on: Mistral's `random_seed`); past it, OpenAI's 400 naming `seed`. */
function exactSeed(source: string): number {
  const n = BigInt(source);
  if (n > INT64_MAX || n < -INT64_MAX - 1n) {
    throw new GatewayError('validation', "Invalid body: 'seed' must be a 64-bit integer, from -9223372036854775808 to 9223372036854775807.", {
      param: 'seed',
    });
  }
  return asWritten(source);
}

const INT64_MAX = 2n ** 63n - 1n;

/** Characters the completion's choices generated. */
function answeredChars(completion: ChatCompletion): number {
  let n = 0;
  for (const choice of completion.choices) n += generatedChars((choice as { message?: Parameters<typeof generatedChars>[0] }).message);
  return n;
}

/**
 * The draft's tokens and cost: the provider's counts, but never more completion tokens than the request allows
 * (`max_tokens` times `n`, which its budget hold covered, or without one what the context window leaves after the
 * provider's prompt count): a host that reports more is billed at the cap, and said so. `prompt`: the provider's
 * prompt count already bounded.
 */
function bill(request: FastifyRequest, offer: Offer, completion: ChatCompletion, prompt: number, completionCap: number): void {
  const usage = request.gw.usage;
  if (!usage) return;
  const done = billedCompletionTokens(request, offer.provider, completion.usage?.completion_tokens ?? 0, completionCap);
  // The client is told what it is billed, not a count the request could not reach.
  if (completion.usage) completion.usage = usageAtMost(completion.usage, prompt, done);
  usage.provider = offer.provider;
  usage.promptTokens = prompt;
  usage.completionTokens = done;
  usage.cost = (prompt * offer.pricing.prompt_per_1m + done * offer.pricing.completion_per_1m) / 1_000_000;
}
