import type { ProviderConfig } from '@gw/schema';
import { DEFAULT_UPSTREAM_TIMEOUT_MS, IDENTITY_ENCODING, type JsonResponse, UpstreamHttp } from '../http-client.js';
import type {
  ChatBody,
  ChatCompletion,
  ChatStream,
  EmbeddingsRequest,
  EmbeddingsResult,
  ProviderAdapter,
  RerankRequest,
  RerankResult,
  RerankWorst,
  UpstreamCall,
} from '../types.js';
import { estimateTokens } from '../usage-estimate.js';
import { noChat } from './chat.js';
import { EMBED_BATCH, parseCohereEmbed, toCohereEmbedBody } from './embeddings.js';
import { listCohereModels } from './models.js';
import { parseCohereRerank, toCohereRerankBody, worstCohereRerank } from './rerank.js';

/** Cohere's native API (rerank v2, embed v2) at its origin, e.g. `https://api.cohere.com`. */
export class CohereAdapter implements ProviderAdapter {
  readonly type = 'cohere' as const;
  readonly vendor = 'cohere' as const;
  readonly id: string;
  readonly region: string;
  readonly rerankTruncatesDocuments = true;
  private readonly http: UpstreamHttp;
  private readonly prefix: string;
  private readonly headers: Record<string, string>;

  constructor(config: ProviderConfig) {
    const url = new URL(config.baseUrl);
    this.id = config.id;
    this.region = config.region;
    this.prefix = url.pathname.replace(/\/+$/, '');
    this.http = new UpstreamHttp(config.id, url.origin, config.timeoutMs ?? DEFAULT_UPSTREAM_TIMEOUT_MS, config.connectTimeoutMs);
    this.headers = { accept: 'application/json', 'content-type': 'application/json', ...IDENTITY_ENCODING };
    if (config.apiKey) this.headers['authorization'] = `Bearer ${config.apiKey}`;
  }

  listModels(signal?: AbortSignal): Promise<string[]> {
    return listCohereModels(this.http, this.prefix, this.headers, signal);
  }

  async chat(_body: ChatBody, _call: UpstreamCall): Promise<ChatCompletion> {
    throw noChat(this.id);
  }

  async chatStream(_body: ChatBody, _call: UpstreamCall): Promise<ChatStream> {
    throw noChat(this.id);
  }

  async rerank(request: RerankRequest, call: UpstreamCall): Promise<RerankResult> {
    const res = await this.post('/v2/rerank', toCohereRerankBody(request, call.upstreamModel), call);
    return parseCohereRerank(this.id, res, request.documents.length);
  }

  rerankWorst(request: RerankRequest): RerankWorst {
    return worstCohereRerank(request);
  }

  /**
   * Inputs past Cohere's 96 per call are sent in batches, in order. Each batch answered while others follow was paid
   * at Cohere: the call is told of it at once, so that the request is billed it even if a later batch fails.
   */
  async embeddings(request: EmbeddingsRequest, call: UpstreamCall): Promise<EmbeddingsResult> {
    const vectors: number[][] = [];
    let promptTokens = 0;
    let counted = true;
    for (let i = 0; i < request.input.length; i += EMBED_BATCH) {
      const texts = request.input.slice(i, i + EMBED_BATCH);
      const res = await this.post('/v2/embed', toCohereEmbedBody(request, texts, call.upstreamModel), call);
      const batch = parseCohereEmbed(this.id, res, texts.length);
      vectors.push(...batch.vectors);
      if (batch.tokens === null) counted = false;
      promptTokens += batch.tokens ?? 0;
      if (i + EMBED_BATCH < request.input.length) call.paid?.({ promptTokens: batch.tokens ?? estimateTokens(texts, 3), completionTokens: 0, units: 0 });
    }
    // One batch without a count would bill its texts at nothing: no count at all, so the route bills its estimate of all.
    return { vectors, promptTokens: counted ? promptTokens : 0 };
  }

  private post(path: string, body: Record<string, unknown>, call: UpstreamCall): Promise<JsonResponse> {
    return this.http.json({
      method: 'POST',
      path: `${this.prefix}${path}`,
      headers: { ...this.headers, 'x-client-name': 'gw', 'x-request-id': call.requestId },
      body: JSON.stringify(body),
      signal: call.signal,
      memory: call.memory,
    });
  }

  close(): Promise<void> {
    return this.http.close();
  }
}
