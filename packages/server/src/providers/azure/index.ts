import type { ProviderConfig } from '@gw/schema';
import { DEFAULT_UPSTREAM_TIMEOUT_MS, IDENTITY_ENCODING, type JsonResponse, UpstreamHttp } from '../http-client.js';
import type { ChatBody, ChatCompletion, ChatStream, EmbeddingsRequest, EmbeddingsResult, ProviderAdapter, UpstreamCall } from '../types.js';
import { parseAzureCompletion, toAzureChatBody } from './chat.js';
import { parseAzureEmbeddings, toAzureEmbeddingsBody } from './embeddings.js';
import { azureError } from './errors.js';
import { parseAzureList } from './models.js';
import { azureChunkStream } from './stream.js';

/**
 * Azure OpenAI in an EU region. With `apiVersion` set it speaks the dated
 * API (`/openai/deployments/{deployment}/…?api-version=`); without, the v1
 * API (`/openai/v1/…`, `model` = deployment). Offers name deployments.
 * Authenticates with `api-key`.
 */
export class AzureOpenAIAdapter implements ProviderAdapter {
  readonly type = 'azure' as const;
  readonly vendor = 'azure' as const;
  readonly id: string;
  readonly region: string;
  private readonly http: UpstreamHttp;
  private readonly prefix: string;
  private readonly apiVersion: string | null;
  private readonly headers: Record<string, string>;

  constructor(config: ProviderConfig) {
    const url = new URL(config.baseUrl);
    this.id = config.id;
    this.region = config.region;
    this.prefix = url.pathname.replace(/\/+$/, '');
    this.apiVersion = config.apiVersion ?? null;
    this.http = new UpstreamHttp(config.id, url.origin, config.timeoutMs ?? DEFAULT_UPSTREAM_TIMEOUT_MS, config.connectTimeoutMs);
    this.headers = { accept: 'application/json', 'content-type': 'application/json', ...IDENTITY_ENCODING };
    if (config.apiKey) this.headers['api-key'] = config.apiKey;
  }

  /** The URL path of one operation on one deployment. */
  path(operation: 'chat/completions' | 'embeddings', deployment: string): string {
    if (this.apiVersion === null) return `${this.prefix}/openai/v1/${operation}`;
    return `${this.prefix}/openai/deployments/${encodeURIComponent(deployment)}/${operation}?api-version=${encodeURIComponent(this.apiVersion)}`;
  }

  /**
   * Deployments, which offers name, where the data plane lists them (the
   * deployments list of older api-versions). Otherwise null: the models
   * list names the models the resource can deploy (`gpt-4o-2024-08-06`),
   * not its deployments, which come from the control plane and are
   * configured (PROVIDERS.md, section 9); it is still read, so that a
   * wrong key or an unreachable resource shows as the provider failing.
   */
  async listModels(signal?: AbortSignal): Promise<string[] | null> {
    const get = (path: string) => this.http.json({ method: 'GET', path: `${this.prefix}${path}`, headers: this.headers, ...(signal ? { signal } : {}) });
    if (this.apiVersion === null) {
      parseAzureList(this.id, await get('/openai/v1/models'));
      return null;
    }
    const v = encodeURIComponent(this.apiVersion);
    const deployments = await get(`/openai/deployments?api-version=${v}`);
    if (deployments.status !== 404) return parseAzureList(this.id, deployments);
    parseAzureList(this.id, await get(`/openai/models?api-version=${v}`));
    return null;
  }

  async chat(body: ChatBody, call: UpstreamCall): Promise<ChatCompletion> {
    const res = await this.post('chat/completions', toAzureChatBody(body, call.upstreamModel, false, this.apiVersion), call);
    return parseAzureCompletion(this.id, res);
  }

  async chatStream(body: ChatBody, call: UpstreamCall): Promise<ChatStream> {
    const res = await this.http.stream({
      method: 'POST',
      path: this.path('chat/completions', call.upstreamModel),
      headers: { ...this.headers, accept: 'text/event-stream', 'x-ms-client-request-id': call.requestId },
      body: JSON.stringify(toAzureChatBody(body, call.upstreamModel, true, this.apiVersion)),
      signal: call.signal,
    });
    if (!res.ok) throw azureError(this.id, res);
    return azureChunkStream(this.http, res.body);
  }

  async embeddings(request: EmbeddingsRequest, call: UpstreamCall): Promise<EmbeddingsResult> {
    const res = await this.post('embeddings', toAzureEmbeddingsBody(request, call.upstreamModel), call);
    return parseAzureEmbeddings(this.id, res, request.input.length);
  }

  private post(operation: 'chat/completions' | 'embeddings', body: Record<string, unknown>, call: UpstreamCall): Promise<JsonResponse> {
    return this.http.json({
      method: 'POST',
      path: this.path(operation, call.upstreamModel),
      headers: { ...this.headers, 'x-ms-client-request-id': call.requestId },
      body: JSON.stringify(body),
      signal: call.signal,
      memory: call.memory,
    });
  }

  close(): Promise<void> {
    return this.http.close();
  }
}
