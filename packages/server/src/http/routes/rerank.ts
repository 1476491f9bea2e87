import { randomUUID } from 'node:crypto';
import { Nullable } from '@gw/schema';
import { type Static, Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { GatewayError } from '../../errors/gateway-error.js';
import { UpstreamError } from '../../errors/upstream-error.js';
import { withoutKnownSecrets } from '../../lib/redact.js';
import type { ProviderAdapter, RerankRequest, RerankResult, UpstreamCall } from '../../providers/types.js';
import { executePlan } from '../../routing/execute.js';
import { keepOffers, refusedWhere } from '../../routing/param-routing.js';
import { heldCost, planOffers } from '../../routing/plan.js';
import type { Offer, RegistryModel } from '../../routing/registry.js';
import { heldFor, reserveBudget } from '../budget.js';
import { newUsageDraft } from '../context.js';
import { resolveModel, routeOptions } from '../model-access.js';
import type { Services } from '../services.js';
import { rerankBill, type UnitBill } from '../unit-billing.js';
import { callUpstream, disarmedAfter, keyedRequestSignal, setRoutingHeaders } from '../upstream-call.js';
import { rerankAtMost } from '../usage-bounds.js';
import type { RouteDocs } from './docs.js';

/** The largest count taken (top_n, max_tokens_per_doc): Cohere's SDKs type them as 32-bit integers. */
const INT32_MAX = 2 ** 31 - 1;

/** A document: a string, or Cohere's object form (string fields; `text` unless `rank_fields` names others). */
const Document = Type.Union([Type.String(), Type.Record(Type.String(), Type.String())]);

export const RerankBody = Type.Object(
  {
    model: Type.String({ minLength: 1, maxLength: 200 }),
    query: Type.String({ minLength: 1 }),
    // No count of its own: Cohere only recommends at most 1,000, and GW_BODY_LIMIT_BYTES bounds the body (docs/decisions.md).
    documents: Type.Array(Document, { minItems: 1 }),
    // Null is "not given", as Cohere takes it: its v4 Python SDK sends top_n and max_chunks_per_doc as null when unset.
    // Bounded as Cohere's SDKs type it (Java's Integer): a count past it reached Cohere as a number its API cannot read,
    // and a vLLM host as "all". A count above the documents' is sent as theirs (every provider answers them all).
    top_n: Type.Optional(Nullable(Type.Integer({ minimum: 1, maximum: INT32_MAX }))),
    return_documents: Type.Optional(Nullable(Type.Boolean({ default: false }))),
    rank_fields: Type.Optional(Nullable(Type.Array(Type.String({ minLength: 1 }), { minItems: 1 }))),
    max_tokens_per_doc: Type.Optional(Nullable(Type.Integer({ minimum: 1, maximum: INT32_MAX }))),
    // Cohere's v2 scheduling hint (its SDK sends it): taken as Cohere takes it, never sent on, as it does not change the ranking.
    priority: Type.Optional(Nullable(Type.Integer({ minimum: 0, maximum: 999 }))),
    // Cohere's v1 chunk count: taken only as null (not given); a count is refused, naming max_tokens_per_doc (errors.ts).
    max_chunks_per_doc: Type.Optional(Type.Null({ description: "Cohere's v1 field, taken only as null: documents are cut by max_tokens_per_doc" })),
  },
  { additionalProperties: false },
);
export type RerankBody = Static<typeof RerankBody>;

const RerankResponse = Type.Object({
  id: Type.String(),
  results: Type.Array(
    Type.Object({ index: Type.Integer(), relevance_score: Type.Number(), document: Type.Optional(Type.Record(Type.String(), Type.String())) }),
  ),
  meta: Type.Object({
    api_version: Type.Object({ version: Type.String() }),
    // input_tokens: what an offer priced per token billed (Cohere's own key for it).
    billed_units: Type.Object({ search_units: Type.Integer(), input_tokens: Type.Optional(Type.Integer()) }),
  }),
});

/** `apiVersion`: Cohere's API version the route answers as in `meta.api_version` (its v1 path's answers say 1, its v2 path's 2). */
export function rerankRoute(app: FastifyInstance, services: Services, docs: RouteDocs, apiVersion: '1' | '2'): void {
  app.post<{ Body: RerankBody }>(
    '/rerank',
    {
      config: { usageKind: 'rerank' },
      schema: docs.operation('rerank', "Document re-ranking in Cohere's wire format (billed per search unit, or per token for an offer priced by tokens)", {
        body: RerankBody,
        response: { 200: RerankResponse },
      }),
    },
    async (request, reply) => {
      const body = request.body;
      const model = await resolveModel(services, request, body.model, 'rerank');
      const texts = body.documents.map((d, i) => documentText(d, i, body.rank_fields));
      const mustTruncate = truncationNeeded(services, model, body.max_tokens_per_doc, texts);
      // Recorded from here on: a request refused above for its body is not (docs/decisions.md, usage records).
      request.gw.usage = newUsageDraft('rerank', model.id);
      const options = routeOptions(services, request);
      const servable = mustTruncate ? offersTruncating(services, model, options.pin, body.max_tokens_per_doc ?? 0) : model;
      const upstream: RerankRequest = {
        query: body.query,
        documents: texts,
        ...(body.top_n == null ? {} : { topN: Math.min(body.top_n, texts.length) }),
        ...(body.max_tokens_per_doc == null ? {} : { maxTokensPerDoc: body.max_tokens_per_doc }),
      };
      // `cheapest` compares what each offer would bill, per search unit or by its token prices.
      const worstCost = options.strategy === 'cheapest' ? (o: Offer) => worstBill(services, o, upstream).cost : undefined;
      const plan = planOffers(servable, options, { promptTokens: 0, maxTokens: 0, worstCost });
      // Set before the hold, so that a client leaving during it leaves a keyed request running, recorded at its end.
      const signal = keyedRequestSignal(services, request, reply);
      const done = await disarmedAfter(signal, async () => {
        // Each offer's most, as its provider bills (Cohere cuts documents before it counts them): the dearest is held.
        const holdCost = (o: Offer) => worstBill(services, o, upstream).cost;
        await reserveBudget(services, request, heldCost(plan, options.maxHops, holdCost));
        const call = { signal, requestId: request.id };
        return executePlan(
          plan,
          (offer) => callUpstream(services, request, offer, (adapter) => rerank(adapter, upstream, { ...call, upstreamModel: offer.upstreamModel })),
          { health: options.stats, offers: servable.offers, pin: options.pin, maxHops: options.maxHops, cost: heldFor(request, holdCost) },
        );
      });
      // Counts above what the query and documents could cost (usage-bounds.ts) are billed, and told, at that bound.
      done.value = rerankAtMost(request.log, done.offer.provider, request.gw.bodyBytes, upstream, done.value);
      const billed = bill(services, request, done.offer, done.value, upstream);
      setRoutingHeaders(reply, request, done.offer, options.strategy, done.hops);
      const ranked = [...done.value.results].sort((x, y) => y.relevanceScore - x.relevanceScore).slice(0, body.top_n ?? texts.length);
      return {
        // The provider's own id, as it wrote it: a provider key echoed in it does not reach the client (lib/redact.ts).
        id: done.value.id == null ? randomUUID() : withoutKnownSecrets(done.value.id),
        results: ranked.map((r) => ({
          index: r.index,
          relevance_score: r.relevanceScore,
          ...(body.return_documents ? { document: asObject(body.documents[r.index] ?? '') } : {}),
        })),
        meta: {
          api_version: { version: apiVersion },
          billed_units: { search_units: done.value.searchUnits, ...(billed.promptTokens > 0 ? { input_tokens: billed.promptTokens } : {}) },
        },
      };
    },
  );
}

/**
 * Whether the request's `max_tokens_per_doc` can cut a document (a token is at least a byte, so a document shorter in
 * bytes is never cut), so that only offers whose provider truncates documents (Cohere's; Scaleway's rerank has no such
 * field) may serve it. A model none of whose offers can is refused with a 400, rather than answered with the
 * documents ranked whole.
 */
function truncationNeeded(services: Services, model: RegistryModel, cap: number | null | undefined, texts: string[]): boolean {
  if (cap == null || texts.every((t) => Buffer.byteLength(t) < cap)) return false;
  if (!model.offers.some((o) => truncates(services, o))) throw capRefused(cap, `'${model.id}': its providers do not`);
  return true;
}

/** The model with only the offers that truncate documents; a pin to a provider that does not is a 400. */
function offersTruncating(services: Services, model: RegistryModel, pin: string | null, cap: number): RegistryModel {
  return keepOffers(
    model,
    pin,
    (o) => truncates(services, o),
    () => capRefused(cap, `${refusedWhere(model, pin)}: it does not`),
  );
}

function capRefused(cap: number, where: string): GatewayError {
  return new GatewayError(
    'validation',
    `Invalid body: 'max_tokens_per_doc' cannot be honoured by ${where} truncate documents. Leave it out, or keep each document shorter than ${cap} bytes.`,
    { param: 'max_tokens_per_doc' },
  );
}

function truncates(services: Services, offer: Offer): boolean {
  return services.adapters.get(offer.provider)?.rerankTruncatesDocuments === true;
}

/** The text ranked for a document: the string itself, an object's `text`, or its `rank_fields` as `field: value` lines. */
function documentText(doc: string | Record<string, string>, i: number, rankFields: string[] | null | undefined): string {
  if (typeof doc === 'string') return doc;
  if (rankFields) {
    // Own fields only: `toString` is not a field of a document.
    const lines = rankFields.filter((f) => Object.hasOwn(doc, f)).map((f) => `${f}: ${doc[f]}`);
    if (lines.length > 0) return lines.join('\n');
    throw new GatewayError('validation', `Invalid body: 'documents.${i}' has none of the rank_fields.`, { param: `documents.${i}` });
  }
  const text = doc['text'];
  if (text === undefined)
    throw new GatewayError('validation', `Invalid body: 'documents.${i}.text' is required (or name other fields in rank_fields).`, {
      param: `documents.${i}.text`,
    });
  return text;
}

function asObject(doc: string | Record<string, string>): Record<string, string> {
  return typeof doc === 'string' ? { text: doc } : doc;
}

/** The most an offer can bill this rerank; nothing where its provider has no rerank (it is never billed there). */
function worstBill(services: Services, offer: Offer, request: RerankRequest): UnitBill {
  const worst = services.adapters.get(offer.provider)?.rerankWorst?.(request);
  return worst ? rerankBill(offer.pricing, worst.searchUnits, worst.tokens) : { promptTokens: 0, completionTokens: 0, cost: 0 };
}

function rerank(adapter: ProviderAdapter, request: RerankRequest, call: UpstreamCall): Promise<RerankResult> {
  if (!adapter.rerank) throw new UpstreamError({ kind: 'http', provider: adapter.id, status: 501, message: `${adapter.id} has no rerank endpoint` });
  return adapter.rerank(request, call);
}

/** Per search unit, or (an offer without per_unit) per token: the provider's count, else the estimate its hold used. */
function bill(services: Services, request: FastifyRequest, offer: Offer, result: RerankResult, sent: RerankRequest): UnitBill {
  // The estimate is only worked out where it is billed: an offer priced by tokens whose provider gave no count.
  const tokens = result.inputTokens ?? (offer.pricing.per_unit === undefined ? worstBill(services, offer, sent).promptTokens : 0);
  const billed = rerankBill(offer.pricing, result.searchUnits, tokens);
  const usage = request.gw.usage;
  if (!usage) return billed;
  usage.provider = offer.provider;
  usage.units = result.searchUnits;
  usage.promptTokens = billed.promptTokens;
  usage.cost = billed.cost;
  return billed;
}
