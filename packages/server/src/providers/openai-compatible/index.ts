import type { ProviderConfig } from '@gw/schema';
import { UpstreamHttp } from '../http-client.js';
import type { ChatBody, ChatCompletion, ChatStream, ProviderAdapter, UpstreamCall } from '../types.js';
import { httpError } from './errors.js';
import { openAiChunkStream } from './stream.js';
import { parseChatCompletion, toUpstreamChatBody, toUpstreamStreamBody } from './chat.js';
import { parseModelList } from './models.js';

const DEFAULT_TIMEOUT_MS = 30_000;

/** Any OpenAI-compatible provider: Scaleway, OVHcloud, IONOS, Nebius, vLLM servers. */
export class OpenAICompatibleAdapter implements ProviderAdapter {
  readonly type = 'openai' as const;
  readonly id: string;
  readonly region: string;
  private readonly http: UpstreamHttp;
  private readonly basePath: string;
  private readonly headers: Record<string, string>;

  constructor(config: ProviderConfig) {
    const url = new URL(config.baseUrl);
    this.id = config.id;
    this.region = config.region;
    this.basePath = url.pathname.replace(/\/+$/, '');
    this.http = new UpstreamHttp(config.id, url.origin, config.timeoutMs ?? DEFAULT_TIMEOUT_MS);
    this.headers = { 'content-type': 'application/json', accept: 'application/json' };
    if (config.apiKey) this.headers['authorization'] = `Bearer ${config.apiKey}`;
  }

  async listModels(signal?: AbortSignal): Promise<string[]> {
    const res = await this.http.json({ method: 'GET', path: `${this.basePath}/models`, headers: this.headers, ...(signal ? { signal } : {}) });
    return parseModelList(this.id, res);
  }

  async chat(body: ChatBody, call: UpstreamCall): Promise<ChatCompletion> {
    const res = await this.http.json({
      method: 'POST',
      path: `${this.basePath}/chat/completions`,
      headers: { ...this.headers, 'x-request-id': call.requestId },
      body: JSON.stringify(toUpstreamChatBody(body, call.upstreamModel)),
      signal: call.signal,
    });
    return parseChatCompletion(this.id, res);
  }

  async chatStream(body: ChatBody, call: UpstreamCall): Promise<ChatStream> {
    const res = await this.http.stream({
      method: 'POST',
      path: `${this.basePath}/chat/completions`,
      headers: { ...this.headers, accept: 'text/event-stream', 'x-request-id': call.requestId },
      body: JSON.stringify(toUpstreamStreamBody(body, call.upstreamModel)),
      signal: call.signal,
    });
    if (!res.ok) throw httpError(this.id, res);
    return openAiChunkStream(this.http, res.body);
  }

  close(): Promise<void> {
    return this.http.close();
  }
}
