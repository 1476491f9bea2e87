import type { JsonResponse } from '../http-client.js';
import { tokenCount } from '../token-count.js';
import type { RerankRequest, RerankResult, RerankWorst } from '../types.js';
import { protocol, withoutList } from './embeddings.js';
import { httpError } from './errors.js';

/**
 * vLLM/Jina-style `/rerank` (Scaleway): Cohere's request fields, strings only. Scaleway's takes no per-document cap
 * (`max_tokens_per_doc`): the rerank route sends it here only when no document is long enough to be cut by it.
 */
export function toUpstreamRerankBody(request: RerankRequest, upstreamModel: string): Record<string, unknown> {
  return {
    model: upstreamModel,
    query: request.query,
    documents: request.documents,
    ...(request.topN === undefined ? {} : { top_n: request.topN }),
  };
}

/** Cohere's search unit: one query over up to 100 documents. */
export function searchUnitsOf(documents: number): number {
  return Math.max(1, Math.ceil(documents / 100));
}

/**
 * The most a rerank is billed: the query with each document (a cross-encoder reads them in pairs) at 3 characters a
 * token, a document at most `perDoc` tokens (what the provider cuts it to); one search unit per 100 documents, a
 * document counting once per `chunk` tokens with the query where the provider bills so (Cohere). Without them (here:
 * units are counted from the documents, and no document is cut), every document whole and once.
 */
export function worstRerank(request: RerankRequest, perDoc = Number.POSITIVE_INFINITY, chunk = Number.POSITIVE_INFINITY): RerankWorst {
  const query = Math.max(1, Math.ceil(request.query.length / 3));
  let tokens = 0;
  let chunks = 0;
  for (const doc of request.documents) {
    const pair = query + Math.max(1, Math.min(perDoc, Math.ceil(doc.length / 3)));
    tokens += pair;
    chunks += Math.max(1, Math.ceil(pair / chunk));
  }
  return { searchUnits: Math.max(1, Math.ceil(chunks / 100)), tokens };
}

/**
 * Whether a result's `index` names a document not ranked before in this answer (`ranked` marks those that were):
 * a fractional, out-of-range or repeated index would give the client no document, or one document twice and
 * another never.
 */
export function ranksNewDocument(index: unknown, ranked: Uint8Array): index is number {
  if (typeof index !== 'number' || !Number.isInteger(index) || index < 0 || index >= ranked.length || ranked[index] === 1) return false;
  ranked[index] = 1;
  return true;
}

/** A result whose `index` is no document's, or repeats one already ranked. */
export function badRerankIndex(index: unknown): string {
  return `a rerank result whose index ${String(JSON.stringify(index)).slice(0, 40)} is no document's or repeats one already ranked`;
}

/** Results with `index` and `relevance_score`, and the token `usage` (an offer priced per token is billed by it); the echoed `document` is dropped. */
export function parseRerank(provider: string, res: JsonResponse, documents: number): RerankResult {
  if (res.status < 200 || res.status >= 300) throw httpError(provider, res);
  const body = res.body as { id?: unknown; results?: unknown; usage?: { total_tokens?: unknown; prompt_tokens?: unknown } | null } | null;
  if (!body || !Array.isArray(body.results)) throw withoutList(provider, body, 'a rerank answer without results');
  const ranked = new Uint8Array(documents);
  const results = body.results.map((r) => {
    const item = r as { index?: unknown; relevance_score?: unknown; score?: unknown } | null;
    const score = item?.relevance_score ?? item?.score;
    if (typeof score !== 'number') throw protocol(provider, 'a rerank result without index and relevance_score');
    if (!ranksNewDocument(item?.index, ranked)) throw protocol(provider, badRerankIndex(item?.index));
    return { index: item.index, relevanceScore: score };
  });
  const tokens = body.usage?.total_tokens ?? body.usage?.prompt_tokens;
  return { id: typeof body.id === 'string' ? body.id : null, results, searchUnits: searchUnitsOf(documents), inputTokens: tokenCount(tokens) };
}
