import type { ProviderConfig } from '@gw/schema';
import { type Vendor, vendorOf } from '../../config/vendor.js';
import { listCohereModels } from '../cohere/models.js';
import { embedInBatches, halves } from '../embed-batches.js';
import { DEFAULT_UPSTREAM_TIMEOUT_MS, IDENTITY_ENCODING, type JsonResponse, UpstreamHttp } from '../http-client.js';
import { ModelListScan } from '../model-list-scan.js';
import { multipartBody } from '../multipart-body.js';
import { fillSamplingDefaults } from '../openai-shape.js';
import { type DimensionsSupport, dimensionsSupport, strippedKeys } from '../param-compat.js';
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
  Transcription,
  TranscriptionRequest,
  UpstreamCall,
} from '../types.js';
import { estimateTokens } from '../usage-estimate.js';
import { parseVerboseTranscription, transcriptionFields } from './audio.js';
import { parseChatCompletion, toUpstreamChatBody, toUpstreamStreamBody } from './chat.js';
import { cohereModelsRoot, toCohereCompatBody } from './cohere-compat.js';
import { dimensionsIgnored, parseEmbeddingsList, toUpstreamEmbeddingsBody } from './embeddings.js';
import { httpError } from './errors.js';
import { parseModelList } from './models.js';
import { parseRerank, toUpstreamRerankBody, worstRerank } from './rerank.js';
import { openAiChunkStream } from './stream.js';

/** Any OpenAI-compatible provider: Scaleway, OVHcloud, IONOS, Nebius, Cohere's compatibility API, vLLM servers. */
export class OpenAICompatibleAdapter implements ProviderAdapter {
  readonly type = 'openai' as const;
  readonly id: string;
  readonly region: string;
  readonly vendor: Vendor;
  /** Keys this provider refuses (PROVIDERS.md 2): left out of its chat bodies. */
  private readonly stripped: readonly string[];
  private readonly http: UpstreamHttp;
  private readonly basePath: string;
  private readonly headers: Record<string, string>;
  /**
   * IONOS' AI Model Hub caps a completion at 16 tokens unless told otherwise (PROVIDERS.md 7): every chat is sent
   * with a cap, the client's or the most the model's context leaves.
   */
  private readonly capsCompletions: boolean;
  /** Cohere's compatibility API: its native model list's root (the compatibility path has none), else null. */
  private readonly cohereRoot: string | null;
  /** Upstream models seen answering full-size vectors despite `dimensions`: refused from then on without a call. */
  private readonly ignoresDimensions = new Map<string, number>();

  constructor(config: ProviderConfig) {
    const url = new URL(config.baseUrl);
    this.id = config.id;
    this.region = config.region;
    this.basePath = url.pathname.replace(/\/+$/, '');
    this.vendor = vendorOf(config);
    this.stripped = strippedKeys(this.vendor);
    this.capsCompletions = this.vendor === 'ionos';
    this.cohereRoot = this.vendor === 'cohere' ? cohereModelsRoot(this.basePath) : null;
    this.http = new UpstreamHttp(config.id, url.origin, config.timeoutMs ?? DEFAULT_UPSTREAM_TIMEOUT_MS, config.connectTimeoutMs);
    this.headers = { 'content-type': 'application/json', accept: 'application/json', ...IDENTITY_ENCODING };
    if (config.apiKey) this.headers['authorization'] = `Bearer ${config.apiKey}`;
  }

  private completionCap(call: UpstreamCall): number | undefined {
    return this.capsCompletions ? sentCompletionCap(call.maxTokens) : undefined;
  }

  /** The body as this provider takes it (Cohere's compatibility API renames and leaves out more than the table's fields). */
  private upstreamBody(upstream: Record<string, unknown>): string {
    return JSON.stringify(fillSamplingDefaults(this.vendor === 'cohere' ? toCohereCompatBody(upstream) : upstream));
  }

  async listModels(signal?: AbortSignal): Promise<string[]> {
    if (this.cohereRoot !== null) return listCohereModels(this.http, this.cohereRoot, this.headers, signal);
    const res = await this.http.scan(
      { method: 'GET', path: `${this.basePath}/models`, headers: this.headers, ...(signal ? { signal } : {}) },
      new ModelListScan(),
    );
    return parseModelList(this.id, res);
  }

  async chat(body: ChatBody, call: UpstreamCall): Promise<ChatCompletion> {
    const res = await this.http.json({
      method: 'POST',
      path: `${this.basePath}/chat/completions`,
      headers: { ...this.headers, 'x-request-id': call.requestId },
      body: this.upstreamBody(toUpstreamChatBody(body, call.upstreamModel, this.completionCap(call), this.stripped)),
      signal: call.signal,
    });
    return parseChatCompletion(this.id, res);
  }

  async chatStream(body: ChatBody, call: UpstreamCall): Promise<ChatStream> {
    const res = await this.http.stream({
      method: 'POST',
      path: `${this.basePath}/chat/completions`,
      headers: { ...this.headers, accept: 'text/event-stream', 'x-request-id': call.requestId },
      body: this.upstreamBody(toUpstreamStreamBody(body, call.upstreamModel, this.completionCap(call), this.stripped)),
      signal: call.signal,
    });
    if (!res.ok) throw httpError(this.id, res);
    return openAiChunkStream(this.http, res.body);
  }

  async embeddings(request: EmbeddingsRequest, call: UpstreamCall): Promise<EmbeddingsResult> {
    const model = call.upstreamModel;
    const known = this.ignoresDimensions.get(model);
    // Known to ignore `dimensions`: refused without a call, unless the size asked for is the one it answers anyway.
    if (request.dimensions !== undefined && known !== undefined && request.dimensions !== known) throw dimensionsIgnored(this.id, model, known);
    const res = await this.post('/embeddings', JSON.stringify(toUpstreamEmbeddingsBody(request, model)), call);
    // A host's cap on the body (OVHcloud's 2 MB) is below the gateway's: the inputs go in halves, each its own call.
    if (res.status === 413 && request.input.length > 1) return this.embedInHalves(request, call);
    return this.readEmbeddings(request, res, request.input, call);
  }

  /** The 413's inputs in halves (halved again while refused), unpaid until answered; vectors and usage put together. */
  private embedInHalves(request: EmbeddingsRequest, call: UpstreamCall): Promise<EmbeddingsResult> {
    const model = call.upstreamModel;
    return embedInBatches(
      request.input.length,
      halves({ start: 0, texts: request.input }),
      {
        send: (texts) => this.post('/embeddings', JSON.stringify(toUpstreamEmbeddingsBody(request, model, texts)), call),
        tooLarge: (res) => res.status === 413,
        read: (res, texts) => this.readEmbeddings(request, res, texts, call),
      },
      call,
    );
  }

  /** One answer's vectors; a size other than the one asked is remembered, billed (the provider answered) and refused. */
  private readEmbeddings(request: EmbeddingsRequest, res: JsonResponse, texts: string[], call: UpstreamCall): EmbeddingsResult {
    const result = parseEmbeddingsList(this.id, res, texts.length);
    const got = result.vectors[0]?.length ?? 0;
    if (request.dimensions !== undefined && got !== request.dimensions) {
      this.ignoresDimensions.set(call.upstreamModel, got);
      // The provider answered, and billed it: the request is billed its count (the gateway's estimate without one).
      call.paid?.({ promptTokens: result.promptTokens > 0 ? result.promptTokens : estimateTokens(texts, 3), completionTokens: 0, units: 0 });
      throw dimensionsIgnored(this.id, call.upstreamModel, got);
    }
    return result;
  }

  /** The provider's rule (PROVIDERS.md), unless the model was seen answering one size whatever was asked. */
  dimensionsSupport(upstreamModel: string, dimensions: number): DimensionsSupport {
    const known = this.ignoresDimensions.get(upstreamModel);
    if (known !== undefined) return known === dimensions ? 'yes' : 'no';
    return dimensionsSupport(this.vendor);
  }

  async rerank(request: RerankRequest, call: UpstreamCall): Promise<RerankResult> {
    const res = await this.post('/rerank', JSON.stringify(toUpstreamRerankBody(request, call.upstreamModel)), call);
    return parseRerank(this.id, res, request.documents.length);
  }

  rerankWorst(request: RerankRequest): RerankWorst {
    return worstRerank(request);
  }

  async transcribe(request: TranscriptionRequest, call: UpstreamCall): Promise<Transcription> {
    const form = multipartBody(transcriptionFields(request, call.upstreamModel), request.file);
    const res = await this.http.json({
      method: 'POST',
      path: `${this.basePath}/audio/transcriptions`,
      headers: { ...this.headers, ...form.headers, 'x-request-id': call.requestId },
      body: form.body,
      signal: call.signal,
    });
    return parseVerboseTranscription(this.id, res);
  }

  private post(path: string, body: string, call: UpstreamCall) {
    return this.http.json({
      method: 'POST',
      path: `${this.basePath}${path}`,
      headers: { ...this.headers, 'x-request-id': call.requestId },
      body,
      signal: call.signal,
      memory: call.memory,
    });
  }

  close(): Promise<void> {
    return this.http.close();
  }
}

/** The most completion tokens sent as a cap the client did not set (as other gateways default a required `max_tokens`). */
export const SENT_COMPLETION_CAP = 4096;

/**
 * The cap sent where the provider's own would cut answers short: what the context leaves, at most
 * {@link SENT_COMPLETION_CAP} (the gateway's estimate of the prompt is no bound on the provider's count, and models
 * often cap their output below their context).
 */
export function sentCompletionCap(maxTokens: number | undefined): number | undefined {
  return maxTokens === undefined ? undefined : Math.min(SENT_COMPLETION_CAP, maxTokens);
}
