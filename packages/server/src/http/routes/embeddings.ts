import { H, Nullable } from '@gw/schema';
import { type Static, Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { GatewayError } from '../../errors/gateway-error.js';
import { UpstreamError } from '../../errors/upstream-error.js';
import { warnOnFailure } from '../../lib/error-summary.js';
import { rememberRefusedSize } from '../../providers/refused-sizes.js';
import type { EmbeddingsRequest, EmbeddingsResult, ProviderAdapter, UpstreamCall } from '../../providers/types.js';
import { estimateTokens } from '../../providers/usage-estimate.js';
import { executePlan } from '../../routing/execute.js';
import { offersGivingDimensions } from '../../routing/param-routing.js';
import { heldCost, planOffers } from '../../routing/plan.js';
import type { Offer, RegistryModel } from '../../routing/registry.js';
import { RequestMemory } from '../body-memory.js';
import { growBudgetHold, heldFor, reserveBudget } from '../budget.js';
import { newUsageDraft, type UsageDraft } from '../context.js';
import { resolveModel, routeOptions } from '../model-access.js';
import { withoutKeyLimitCount } from '../plugins/rate-limit.js';
import type { Services } from '../services.js';
import { callUpstreamPaidInParts, keyedRequestSignal, setRoutingHeaders } from '../upstream-call.js';
import { countAtMost, embeddingTokensBound } from '../usage-bounds.js';
import type { RouteDocs } from './docs.js';

export const EmbeddingsBody = Type.Object(
  {
    model: Type.String({ minLength: 1, maxLength: 200 }),
    input: Type.Union([Type.String({ minLength: 1 }), Type.Array(Type.String({ minLength: 1 }), { minItems: 1, maxItems: 2048 })], {
      description: 'A text, or up to 2048 texts; none of them empty (as OpenAI refuses)',
    }),
    // Null is "not given", as OpenAI takes it: LiteLLM and Dify send `encoding_format: null` when none is set.
    encoding_format: Type.Optional(Nullable(Type.Union([Type.Literal('float'), Type.Literal('base64')], { default: 'float' }))),
    dimensions: Type.Optional(
      Nullable(Type.Integer({ minimum: 1, maximum: 65_536, description: 'Passed to providers that support it; a 400 where the model cannot' })),
    ),
    user: Type.Optional(Nullable(Type.String({ maxLength: 256, description: 'Accepted for OpenAI compatibility; never sent upstream' }))),
    input_type: Type.Optional(
      Nullable(
        Type.Union(
          ['search_document', 'search_query', 'classification', 'clustering'].map((t) => Type.Literal(t)),
          {
            description: "Cohere's input_type (extension field; default search_document)",
          },
        ),
      ),
    ),
  },
  { additionalProperties: false },
);
export type EmbeddingsBody = Static<typeof EmbeddingsBody>;

const EmbeddingsList = Type.Object({
  object: Type.Literal('list'),
  data: Type.Array(
    Type.Object({ object: Type.Literal('embedding'), index: Type.Integer(), embedding: Type.Union([Type.Array(Type.Number()), Type.String()]) }),
  ),
  model: Type.String(),
  usage: Type.Object({ prompt_tokens: Type.Integer(), total_tokens: Type.Integer() }),
});

export function embeddingsRoute(app: FastifyInstance, services: Services, docs: RouteDocs): void {
  app.post<{ Body: EmbeddingsBody }>(
    '/embeddings',
    {
      config: { usageKind: 'embedding' },
      schema: docs.operation('createEmbeddings', 'Vector embeddings (OpenAI list shape, billed per token)', {
        body: EmbeddingsBody,
        response: { 200: EmbeddingsList },
      }),
    },
    async (request, reply) => {
      const body = request.body;
      const model = await resolveModel(services, request, body.model, 'embedding');
      // Variant B: embeddings are a private beta, served only for the models marked beta.
      if (request.gw.variant === 'b' && !model.beta) {
        throw new GatewayError('model_not_found', `The model '${body.model}' is not part of the embeddings beta.`, { param: 'model' });
      }
      // Recorded from here on: a request refused above for its model is not (docs/decisions.md, usage records).
      // Kept here too: a client that leaves has its request recorded (and its draft taken off it) before the route ends.
      const usage = newUsageDraft('embedding', model.id);
      request.gw.usage = usage;
      const input = typeof body.input === 'string' ? [body.input] : body.input;
      const options = routeOptions(services, request);
      // At most the context per text: Cohere bills a longer one as the context, the others refuse it unbilled.
      const promptTokens = estimateTokens(input, 3, model.context_window);
      // Offers that cannot give the size asked are left out before planning, so that none is tried first and refuses it.
      const servable = body.dimensions == null ? model : offersGivingDimensions(model, body.dimensions, services.adapters, options.pin);
      const plan = planOffers(servable, options, { promptTokens, maxTokens: 0 });
      const holdCost = (o: Offer) => (promptTokens * o.pricing.prompt_per_1m) / 1_000_000;
      // Set before anything is awaited, so that a client leaving meanwhile leaves a keyed request running, recorded at its end.
      const signal = keyedRequestSignal(services, request, reply);
      let settleBeta: ((tokens: number) => Promise<void>) | null = null;
      try {
        await reserveBudget(services, request, heldCost(plan, options.maxHops, holdCost));
        // Admitted to the beta's window only once the budget lets the request go upstream: a key's 402s take none of the
        // workspace's allowance. A hold taken for a request the window refuses is released when its 429 is answered.
        settleBeta = request.gw.variant === 'b' ? await admitBeta(services, request, reply, input, model.context_window) : null;
        const upstream: EmbeddingsRequest = {
          input,
          ...(body.dimensions == null ? {} : { dimensions: body.dimensions }),
          ...(body.input_type ? { inputType: body.input_type } : {}),
        };
        // The providers' answers are held against GW_BODY_MEMORY_MB as they arrive, as the body is (http/body-memory.ts).
        const call = { signal, requestId: request.id, memory: new RequestMemory(services.bodyMemory, request.gw) };
        // The most tokens any provider can count the texts (usage-bounds.ts): no part, nor the answer, is billed more.
        const tokensBound = embeddingTokensBound(request.gw.bodyBytes, input.length);
        // What failed attempts were paid for is billed on top of the answer: the hold grows by it before a failover.
        let partsHeld = 0;
        const holdParts = async () => {
          const grown = await growBudgetHold(services, request, usage.cost - partsHeld);
          if (grown) partsHeld = usage.cost;
          return grown;
        };
        const done = await executePlan(
          plan,
          (offer) =>
            callUpstreamPaidInParts(services, request, offer, tokensBound, (adapter, paid) =>
              embed(adapter, upstream, { ...call, upstreamModel: offer.upstreamModel, paid }),
            ),
          {
            health: options.stats,
            mayFailOver: holdParts,
            offers: servable.offers,
            pin: options.pin,
            maxHops: options.maxHops,
            cost: heldFor(request, holdCost),
          },
        );
        // A provider that reported no count (or 0, which no input costs): answered and billed at the estimate the hold used;
        // one that reported more than the texts' bytes could tokenize into, at that bound.
        const reported = done.value.promptTokens;
        const counted = countAtMost(request.log, done.offer.provider, 'embedding tokens', reported, tokensBound);
        const result = reported > 0 && counted === reported ? done.value : { ...done.value, promptTokens: reported > 0 ? counted : promptTokens };
        bill(usage, done.offer, result);
        setRoutingHeaders(reply, request, done.offer, options.strategy, done.hops);
        // The answer's usage is what the request is billed, batches of a failed attempt included, as a client adds it up.
        return render(model, { ...result, promptTokens: usage.promptTokens }, body.encoding_format ?? 'float');
      } finally {
        signal.disarm();
        // The window counts every token sent upstream, those of a failed attempt's paid batches too.
        await settleBeta?.(usage.promptTokens);
      }
    },
  );
}

async function embed(adapter: ProviderAdapter, request: EmbeddingsRequest, call: UpstreamCall): Promise<EmbeddingsResult> {
  if (!adapter.embeddings) throw new UpstreamError({ kind: 'http', provider: adapter.id, status: 501, message: `${adapter.id} has no embeddings endpoint` });
  try {
    return await adapter.embeddings(request, call);
  } catch (err) {
    const refused = refusedField(err, request);
    // Remembered, so that the next request of this size is planned around this offer rather than refused again.
    if (refused !== err && request.dimensions !== undefined) rememberRefusedSize(adapter, call.upstreamModel, request.dimensions);
    throw refused;
  }
}

/**
 * A provider's refusal of the size asked for names the client's field, whatever the provider calls it (Mistral's and
 * Cohere's `output_dimension`): `dimensions` is the only field of the request a provider refuses by name. The size is
 * the model's there (Cohere's v3 models give none, embed v4 four; Mistral's up to its own), not the request's fault:
 * the next offer is tried, and the last one's refusal is the client's 400.
 */
function refusedField(err: unknown, request: EmbeddingsRequest): unknown {
  if (!(err instanceof UpstreamError) || !err.clientFault || request.dimensions === undefined) return err;
  if (err.param !== 'dimensions' && (err.param !== null || !/dimension/i.test(err.detail))) return err;
  return new UpstreamError({
    kind: err.kind,
    provider: err.provider,
    message: err.message,
    detail: err.detail,
    param: 'dimensions',
    elsewhere: true,
    cause: err,
    ...(err.status === undefined ? {} : { status: err.status }),
    ...(err.retryAfterS === undefined ? {} : { retryAfterS: err.retryAfterS }),
  });
}

/**
 * Holds the request against its workspace's beta window (its key's, for
 * a key without a workspace); returns the settle step that replaces the
 * estimate with the provider's count once it is known.
 */
async function admitBeta(
  services: Services,
  request: FastifyRequest,
  reply: FastifyReply,
  input: string[],
  context: number,
): Promise<(tokens: number) => Promise<void>> {
  const key = request.gw.key;
  const scope = key?.workspaceId ? `ws:${key.workspaceId}` : `key:${key?.id ?? 'anonymous'}`;
  const quota = services.betaQuota;
  // A text past the model's context counts as the context: Cohere embeds (and bills) its start, the others refuse it unbilled.
  const tokens = estimateTokens(input, 4, context);
  if (tokens > quota.limits.tokens) {
    throw new GatewayError(
      'validation',
      `This input (about ${tokens} tokens) is more than the embeddings beta allows per minute (${quota.limits.tokens} tokens).`,
      { param: 'input' },
    );
  }
  const decision = await quota.admit(scope, request.id, tokens);
  if (!decision.allowed) {
    const limit = decision.reason === 'requests' ? `${quota.limits.requests} requests` : `${quota.limits.tokens.toLocaleString('en')} tokens`;
    // Say whose allowance it is: a key without a workspace has its own, shared with no other key.
    const holder = key?.workspaceId ? 'workspace' : 'API key';
    // The key's X-RateLimit-* count let this request in; the beta's window refused it, and Retry-After says when it has room.
    withoutKeyLimitCount(reply);
    throw new GatewayError('rate_limited', `Embeddings beta limit exceeded (${limit} per minute per ${holder})`, {
      retryAfterMs: decision.waitMs,
    });
  }
  // Both limits apply: a request the beta's window let through unenforced (Redis away) is not said to be held to them.
  if (!decision.enforced) reply.header(H.rateLimitEnforced, 'false');
  return (used) => quota.settle(scope, request.id, used).catch(warnOnFailure(request.log, 'beta quota settle failed'));
}

/** The answer's cost joins what failed attempts were billed (batches paid before a later one failed) on the request's usage. */
function bill(usage: UsageDraft, offer: Offer, result: EmbeddingsResult): void {
  usage.provider = offer.provider;
  usage.promptTokens += result.promptTokens;
  usage.cost += (result.promptTokens * offer.pricing.prompt_per_1m) / 1_000_000;
}

function render(model: RegistryModel, result: EmbeddingsResult, encoding: 'float' | 'base64') {
  return {
    object: 'list' as const,
    data: result.vectors.map((v, index) => ({ object: 'embedding' as const, index, embedding: encoding === 'base64' ? toBase64(v) : v })),
    model: model.id,
    usage: { prompt_tokens: result.promptTokens, total_tokens: result.promptTokens },
  };
}

/** OpenAI's base64 encoding: the vector as little-endian float32 bytes. */
export function toBase64(vector: number[]): string {
  const bytes = Buffer.alloc(vector.length * 4);
  for (const [i, x] of vector.entries()) bytes.writeFloatLE(x, i * 4);
  return bytes.toString('base64');
}
