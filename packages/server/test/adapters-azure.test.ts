import { type Simulator, startSimulator } from '@gw/simulator';
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { parseAzureCompletion, toAzureChatBody } from '../src/providers/azure/chat.js';
import { azureError, goDurationSeconds } from '../src/providers/azure/errors.js';
import { AzureOpenAIAdapter } from '../src/providers/azure/index.js';
import { azureChunkStream } from '../src/providers/azure/stream.js';
import { UpstreamHttp } from '../src/providers/http-client.js';
import { answer, call, collect, providerConfig, sseBody, upstreamError } from './helpers/adapters.js';
import { startGateway, type TestGateway } from './helpers/gateway.js';

const http = new UpstreamHttp('azure', 'http://127.0.0.1:9', 1000);
const filter = { hate: { filtered: false, severity: 'safe' }, violence: { filtered: false, severity: 'safe' } };

describe('Azure adapter fixtures', () => {
  it('builds dated deployment URLs with api-version, or v1 URLs with the deployment as model', () => {
    const dated = new AzureOpenAIAdapter({
      id: 'az',
      type: 'azure',
      baseUrl: 'https://res.openai.azure.com',
      region: 'swedencentral',
      apiVersion: '2024-10-21',
    });
    expect(dated.path('chat/completions', 'gpt-4o-mini')).toBe('/openai/deployments/gpt-4o-mini/chat/completions?api-version=2024-10-21');
    const v1 = new AzureOpenAIAdapter({ id: 'az', type: 'azure', baseUrl: 'https://res.openai.azure.com/', region: 'swedencentral' });
    expect(v1.path('embeddings', 'emb')).toBe('/openai/v1/embeddings');
  });

  it('asks for stream usage only where the api-version knows stream_options', () => {
    const body = { model: 'openai/gpt-4o-mini', messages: [{ role: 'assistant', content: 'x', reasoning_content: 'y' }] };
    expect(toAzureChatBody(body, 'gpt-4o-mini', true, '2024-10-21')).toMatchObject({
      model: 'gpt-4o-mini',
      stream: true,
      stream_options: { include_usage: true },
    });
    expect(toAzureChatBody(body, 'gpt-4o-mini', true, '2024-06-01').stream_options).toBeUndefined();
    expect(toAzureChatBody(body, 'gpt-4o-mini', true, null).stream_options).toEqual({ include_usage: true });
    expect((toAzureChatBody(body, 'd', false, '2024-10-21').messages as Record<string, unknown>[])[0]).toEqual({ role: 'assistant', content: 'x' });
  });

  it('drops content-filter annotations from completions', () => {
    const completion = parseAzureCompletion(
      'azure',
      answer(200, {
        id: 'chatcmpl-1',
        object: 'chat.completion',
        created: 1,
        model: 'gpt-4o-mini-2024-07-18',
        prompt_filter_results: [{ prompt_index: 0, content_filter_results: filter }],
        choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: 'Hi' }, content_filter_results: filter }],
        usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
      }),
    );
    expect(completion.prompt_filter_results).toBeUndefined();
    expect(completion.choices[0]).toEqual({ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: 'Hi' } });
  });

  it('drops the prompt-filter chunk and annotation-only choices from streams, so an empty-choices chunk is always usage', async () => {
    const chunks = await collect(
      azureChunkStream(
        http,
        sseBody([
          JSON.stringify({
            choices: [],
            created: 0,
            id: '',
            model: '',
            object: '',
            prompt_filter_results: [{ prompt_index: 0, content_filter_results: filter }],
          }),
          JSON.stringify({
            id: 'c1',
            object: 'chat.completion.chunk',
            created: 1,
            model: 'm',
            choices: [{ index: 0, delta: { role: 'assistant', content: 'Hi' }, content_filter_results: filter, finish_reason: null }],
          }),
          JSON.stringify({
            id: 'c1',
            object: 'chat.completion.chunk',
            created: 1,
            model: 'm',
            choices: [{ index: 0, finish_reason: null, content_filter_offsets: { check_offset: 0, start_offset: 0, end_offset: 2 } }],
          }),
          JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] }),
          JSON.stringify({
            id: 'c1',
            object: 'chat.completion.chunk',
            created: 1,
            model: 'm',
            choices: [],
            usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
          }),
          '[DONE]',
        ]),
      ),
    );
    expect(chunks).toHaveLength(3);
    expect(chunks[0]?.choices).toEqual([{ index: 0, delta: { role: 'assistant', content: 'Hi' }, finish_reason: null }]);
    expect(chunks[1]?.choices).toEqual([{ index: 0, delta: {}, finish_reason: 'stop' }]);
    expect(chunks[2]).toMatchObject({ choices: [], usage: { total_tokens: 2 } });
  });

  it('maps errors: DeploymentNotFound 404, content_filter 400, 429 with retry-after, x-ratelimit-reset-tokens or the message', () => {
    const missing = azureError(
      'azure',
      answer(404, { error: { code: 'DeploymentNotFound', message: 'The API deployment for this resource does not exist.' } }),
    );
    expect([missing.status, missing.retryable]).toEqual([404, true]);
    const filtered = azureError(
      'azure',
      answer(400, {
        error: {
          code: 'content_filter',
          message: 'The response was filtered',
          param: 'prompt',
          status: 400,
          innererror: { code: 'ResponsibleAIPolicyViolation' },
        },
      }),
    );
    expect([filtered.status, filtered.clientFault]).toEqual([400, true]);
    expect(filtered.message).toContain("Azure's content filter refused the prompt (ResponsibleAIPolicyViolation)");
    expect(azureError('azure', answer(429, { error: { code: '429', message: 'x' } }, { 'retry-after': '4' })).retryAfterS).toBe(4);
    expect(azureError('azure', answer(429, { error: { code: '429', message: 'x' } }, { 'x-ratelimit-reset-tokens': '6m0s' })).retryAfterS).toBe(360);
    expect(azureError('azure', answer(429, { error: { code: '429', message: 'Please retry after 45 seconds.' } })).retryAfterS).toBe(45);
    expect([goDurationSeconds('250ms'), goDurationSeconds('1.5s'), goDurationSeconds('soon')]).toEqual([1, 2, undefined]);
  });
});

describe('Azure adapter against the simulated Azure OpenAI resource', () => {
  let sim: Simulator;
  let adapter: AzureOpenAIAdapter;
  beforeAll(async () => {
    sim = await startSimulator({ latencyScale: 0, only: ['azure'] });
    adapter = new AzureOpenAIAdapter(providerConfig(sim, 'azure'));
  });
  afterAll(async () => {
    await adapter?.close();
    await sim?.close();
  });
  beforeEach(() => sim.providers.azure?.reset());

  it('lists deployments only where the data plane has their list; otherwise the configured deployments stand', async () => {
    // 2024-10-21 has no deployments list, and its models list names model versions, which no offer names.
    expect(await adapter.listModels()).toBeNull();
    expect(sim.providers.azure?.stats().last?.path).toBe('/openai/models');
    const old = new AzureOpenAIAdapter(providerConfig(sim, 'azure', { apiVersion: '2023-03-15-preview' }));
    expect(await old.listModels()).toContain('gpt-4o-mini');
    await old.close();
    // The models list is still read: a wrong key shows as the provider failing, not as every deployment standing.
    const wrongKey = new AzureOpenAIAdapter(providerConfig(sim, 'azure', { apiKey: 'nope' }));
    expect((await upstreamError(() => wrongKey.listModels())).status).toBe(401);
    await wrongKey.close();
    const v1 = new AzureOpenAIAdapter(providerConfig(sim, 'azure', { apiVersion: undefined }));
    expect(await v1.listModels()).toBeNull();
    const completion = await v1.chat({ model: 'x', messages: [{ role: 'user', content: 'Hello Stockholm' }] }, call('gpt-4o-mini'));
    expect(completion.choices).toHaveLength(1);
    expect(sim.providers.azure?.stats().last?.path).toBe('/openai/v1/chat/completions');
    await v1.close();
  });

  it('streams through the content filter with usage last, sending api-key, never a Bearer token', async () => {
    const chunks = await collect(await adapter.chatStream({ model: 'x', messages: [{ role: 'user', content: 'Hello Malmo' }] }, call('gpt-4o-mini')));
    const text = chunks.flatMap((c) => c.choices.map((x) => (x as { delta: { content?: string } }).delta.content ?? '')).join('');
    expect(text).toContain('Malmo');
    expect(chunks.slice(0, -1).every((c) => c.choices.length > 0)).toBe(true);
    expect(chunks.at(-1)?.usage?.total_tokens).toBeGreaterThan(0);
    const sent = sim.providers.azure?.stats().last;
    expect(sent?.path).toBe('/openai/deployments/gpt-4o-mini/chat/completions');
    expect(sent?.query['api-version']).toBe('2024-10-21');
    expect(sent?.headers['api-key']).toBe(sim.providers.azure?.apiKey);
    expect(sent?.headers.authorization).toBeUndefined();
  });

  it('maps the resource’s errors: prompt filtered 400, missing deployment 404, 429 without retry-after', async () => {
    sim.providers.azure?.setFault({ kind: 'content_filter', on: 'prompt', times: 1 });
    const filtered = await upstreamError(() => adapter.chat({ model: 'x', messages: [{ role: 'user', content: 'x' }] }, call('gpt-4o-mini')));
    expect([filtered.status, filtered.clientFault]).toEqual([400, true]);
    const missing = await upstreamError(() => adapter.chat({ model: 'x', messages: [{ role: 'user', content: 'x' }] }, call('gpt-5-nowhere')));
    expect([missing.status, missing.retryable]).toEqual([404, true]);
    sim.providers.azure?.setFault({ kind: 'status', status: 429, variant: 1, times: 1 });
    const limited = await upstreamError(() => adapter.chat({ model: 'x', messages: [{ role: 'user', content: 'x' }] }, call('gpt-4o-mini')));
    expect([limited.status, limited.retryAfterS]).toEqual([429, 1]);
  });
});

describe('Azure through the gateway', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await startGateway();
  }, 60_000);
  afterAll(() => gw?.close());

  it('answers an OpenAI chat completion without Azure’s filter fields; a filtered prompt is the client’s 400', async () => {
    const { key } = await gw.createKey();
    const client = new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 0 });
    const { data, response } = await client.chat.completions
      .create({ model: 'openai/gpt-4o-mini', messages: [{ role: 'user', content: 'Hej' }] })
      .withResponse();
    expect(response.headers.get('x-gateway-provider')).toBe('azure');
    expect(data.model).toBe('openai/gpt-4o-mini');
    expect(JSON.stringify(data)).not.toContain('filter_results');
    gw.sim.providers.azure?.setFault({ kind: 'content_filter', on: 'prompt', times: 1 });
    const err = (await client.chat.completions
      .create({ model: 'openai/gpt-4o-mini', messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
    expect([err.status, err.code]).toEqual([400, 'validation_error']);
    expect(err.message).toContain('content filter');
  });
});
