import { UpstreamError } from '../../errors/upstream-error.js';
import type { JsonResponse } from '../http-client.js';
import { badRerankIndex, ranksNewDocument, searchUnitsOf, worstRerank } from '../openai-compatible/rerank.js';
import { tokenCount } from '../token-count.js';
import type { RerankRequest, RerankResult, RerankWorst } from '../types.js';
import { cohereError } from './errors.js';

/** Cohere's `max_tokens_per_doc` when none is sent: a longer document is cut to it before it is ranked and billed. */
const DEFAULT_TOKENS_PER_DOC = 4096;
/** Cohere's billing chunk: a document past this many tokens with the query counts as one more document per chunk. */
const CHUNK_TOKENS = 500;

/** What Cohere bills at most: each document cut to `max_tokens_per_doc` (4,096 unless sent), then chunked with the query. */
export function worstCohereRerank(request: RerankRequest): RerankWorst {
  return worstRerank(request, request.maxTokensPerDoc ?? DEFAULT_TOKENS_PER_DOC, CHUNK_TOKENS);
}

/** Rerank v2: documents are strings; v2 echoes no documents (the gateway adds them back when asked). */
export function toCohereRerankBody(request: RerankRequest, upstreamModel: string): Record<string, unknown> {
  return {
    model: upstreamModel,
    query: request.query,
    documents: request.documents,
    ...(request.topN === undefined ? {} : { top_n: request.topN }),
    ...(request.maxTokensPerDoc === undefined ? {} : { max_tokens_per_doc: request.maxTokensPerDoc }),
  };
}

/** `{id, results:[{index, relevance_score}], meta:{billed_units:{search_units, input_tokens?}, tokens?:{input_tokens}}}`. */
export function parseCohereRerank(provider: string, res: JsonResponse, documents: number): RerankResult {
  if (res.status < 200 || res.status >= 300) throw cohereError(provider, res);
  const body = res.body as {
    id?: unknown;
    results?: unknown;
    meta?: { billed_units?: { search_units?: unknown; input_tokens?: unknown }; tokens?: { input_tokens?: unknown } };
  } | null;
  if (!body || !Array.isArray(body.results))
    throw new UpstreamError({ kind: 'protocol', provider, message: `${provider} sent a rerank answer without results` });
  const ranked = new Uint8Array(documents);
  const results = body.results.map((r) => {
    const item = (r ?? {}) as { index?: unknown; relevance_score?: unknown };
    if (typeof item.relevance_score !== 'number') {
      throw new UpstreamError({ kind: 'protocol', provider, message: `${provider} sent a rerank result without index and relevance_score` });
    }
    if (!ranksNewDocument(item.index, ranked)) {
      throw new UpstreamError({ kind: 'protocol', provider, message: `${provider} sent ${badRerankIndex(item.index)}` });
    }
    return { index: item.index, relevanceScore: item.relevance_score };
  });
  const units = body.meta?.billed_units?.search_units;
  // The tokens it billed, else those it says it read: what an offer priced per token is billed.
  const tokens = tokenCount(body.meta?.billed_units?.input_tokens) ?? tokenCount(body.meta?.tokens?.input_tokens);
  return {
    id: typeof body.id === 'string' ? body.id : null,
    results,
    // A count that is none (negative, text) is the documents' own, as without one.
    searchUnits: tokenCount(units) ?? searchUnitsOf(documents),
    inputTokens: tokens,
  };
}
