import type { ProviderConfig } from '@gw/schema';
import { embedInBatches } from '../embed-batches.js';
import { DEFAULT_UPSTREAM_TIMEOUT_MS, IDENTITY_ENCODING, UpstreamHttp } from '../http-client.js';
import { ModelListScan } from '../model-list-scan.js';
import { multipartBody } from '../multipart-body.js';
import { fillSamplingDefaults } from '../openai-shape.js';
import type {
  ChatBody,
  ChatCompletion,
  ChatStream,
  EmbeddingsRequest,
  EmbeddingsResult,
  ProviderAdapter,
  Transcription,
  TranscriptionRequest,
  UpstreamCall,
} from '../types.js';
import { parseVoxtral, voxtralFields } from './audio.js';
import { parseMistralCompletion, toMistralChatBody } from './chat.js';
import { embedBatches, overBatchLimit, parseMistralEmbeddings, toMistralEmbeddingsBody } from './embeddings.js';
import { mistralError } from './errors.js';
import { parseMistralModels } from './models.js';
import { mistralChunkStream } from './stream.js';

/** Mistral La Plateforme (`https://api.mistral.ai/v1`): chat, embeddings, Voxtral transcription. */
export class MistralAdapter implements ProviderAdapter {
  readonly type = 'mistral' as const;
  readonly vendor = 'mistral' as const;
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
    this.http = new UpstreamHttp(config.id, url.origin, config.timeoutMs ?? DEFAULT_UPSTREAM_TIMEOUT_MS, config.connectTimeoutMs);
    this.headers = { accept: 'application/json', ...IDENTITY_ENCODING };
    if (config.apiKey) this.headers['authorization'] = `Bearer ${config.apiKey}`;
  }

  async listModels(signal?: AbortSignal): Promise<string[]> {
    const res = await this.http.scan(
      { method: 'GET', path: `${this.basePath}/models`, headers: this.headers, ...(signal ? { signal } : {}) },
      new ModelListScan(true),
    );
    return parseMistralModels(this.id, res);
  }

  async chat(body: ChatBody, call: UpstreamCall): Promise<ChatCompletion> {
    const res = await this.postJson('/chat/completions', fillSamplingDefaults(toMistralChatBody(body, call.upstreamModel, false)), call);
    return parseMistralCompletion(this.id, res);
  }

  async chatStream(body: ChatBody, call: UpstreamCall): Promise<ChatStream> {
    const res = await this.http.stream({
      method: 'POST',
      path: `${this.basePath}/chat/completions`,
      headers: { ...this.headers, 'content-type': 'application/json', accept: 'text/event-stream', 'x-request-id': call.requestId },
      body: JSON.stringify(fillSamplingDefaults(toMistralChatBody(body, call.upstreamModel, true))),
      signal: call.signal,
    });
    if (!res.ok) throw mistralError(this.id, res);
    return mistralChunkStream(this.http, res.body);
  }

  /**
   * Inputs over Mistral's tokens per call are sent in several calls (embedBatches), each answer's vectors put back at
   * their inputs' places. Each call answered while others follow was paid at Mistral: the call is told of it at once,
   * so that the request is billed it even if a later call fails (as Cohere's batches). A call Mistral refuses as over
   * its batch limit (unpaid) is sent again in halves.
   */
  async embeddings(request: EmbeddingsRequest, call: UpstreamCall): Promise<EmbeddingsResult> {
    return embedInBatches(
      request.input.length,
      embedBatches(request.input),
      {
        send: (texts) => this.postJson('/embeddings', toMistralEmbeddingsBody(request, texts, call.upstreamModel), call),
        tooLarge: overBatchLimit,
        read: (res, texts) => parseMistralEmbeddings(this.id, res, texts.length),
      },
      call,
    );
  }

  async transcribe(request: TranscriptionRequest, call: UpstreamCall): Promise<Transcription> {
    const { fields, granularity } = voxtralFields(request, call.upstreamModel);
    const form = multipartBody(fields, request.file);
    const res = await this.http.json({
      method: 'POST',
      path: `${this.basePath}/audio/transcriptions`,
      headers: { ...this.headers, ...form.headers, 'x-request-id': call.requestId },
      body: form.body,
      signal: call.signal,
    });
    return parseVoxtral(this.id, res, request, granularity);
  }

  private postJson(path: string, body: Record<string, unknown>, call: UpstreamCall) {
    return this.http.json({
      method: 'POST',
      path: `${this.basePath}${path}`,
      headers: { ...this.headers, 'content-type': 'application/json', 'x-request-id': call.requestId },
      body: JSON.stringify(body),
      signal: call.signal,
      memory: call.memory,
    });
  }

  close(): Promise<void> {
    return this.http.close();
  }
}
