import type { GatewayFileConfig } from '@gw/schema';
import { type Simulator, startSimulator } from '@gw/simulator';
import type OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { estimatePromptTokens } from '../src/http/routes/chat-completions.js';
import { resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';
import { openAiClients } from './helpers/sdk.js';

/**
 * Cohere's Command models served through Cohere's OpenAI compatibility API, configured as an `openai`-type provider
 * (`vendor: cohere`, since the simulator's host does not say), with the official OpenAI SDK as the client.
 */
const COMMAND = 'cohere/command-a'; // only on Cohere's compatibility API
const DUO = 'test/command-duo'; // Cohere's compatibility API first, then Nebius (another model: what routing around looks like)
const UPSTREAM = 'command-a-03-2025';
const EMBED = 'test/cohere-embed-compat'; // embeddings through the compatibility API
// Cohere's compatibility API again under a provider id per variant: a 429 naming its wait sits its offer out for that
// wait, so each variant's 429 is asked of an offer no other request here uses.
const WAITING = { A: 'cohere-wait-a', B: 'cohere-wait-b' } as const;
const PRICE = { prompt_per_1m: 2.5, completion_per_1m: 10, currency: 'EUR' as const };

let sim: Simulator;
let gw: TestGateway;
let a: OpenAI;
let b: OpenAI;
let keyId: string;

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  const cohere = sim.providers.cohere;
  if (!cohere) throw new Error('no cohere');
  const catalogue = (c: GatewayFileConfig): GatewayFileConfig => ({
    providers: [
      ...c.providers,
      { id: 'cohere-compat', type: 'openai', vendor: 'cohere', baseUrl: `${cohere.url}/compatibility/v1`, apiKey: cohere.apiKey, region: 'eu' },
      ...Object.values(WAITING).map((id) => ({
        id,
        type: 'openai' as const,
        vendor: 'cohere' as const,
        baseUrl: `${cohere.url}/compatibility/v1`,
        apiKey: cohere.apiKey,
        region: 'eu',
      })),
    ],
    models: [
      ...c.models,
      {
        id: COMMAND,
        kind: 'chat',
        owned_by: 'cohere',
        context_window: 256_000,
        capabilities: ['streaming', 'tools', 'json'],
        offers: [{ provider: 'cohere-compat', upstreamModel: UPSTREAM, pricing: PRICE }],
      },
      ...Object.values(WAITING).map((provider) => ({
        id: `test/${provider}`,
        kind: 'chat' as const,
        owned_by: 'cohere',
        context_window: 256_000,
        offers: [{ provider, upstreamModel: UPSTREAM, pricing: PRICE }],
      })),
      {
        id: EMBED,
        kind: 'embedding',
        owned_by: 'cohere',
        context_window: 512,
        beta: true, // variant B serves only the embeddings beta
        offers: [
          { provider: 'cohere-compat', upstreamModel: 'embed-multilingual-v3.0', pricing: { prompt_per_1m: 0.1, completion_per_1m: 0, currency: 'EUR' } },
        ],
      },
      {
        id: DUO,
        kind: 'chat',
        owned_by: 'cohere',
        context_window: 128_000,
        capabilities: ['streaming', 'tools'],
        offers: [
          { provider: 'cohere-compat', upstreamModel: UPSTREAM, pricing: PRICE },
          { provider: 'nebius', upstreamModel: 'meta-llama/Llama-3.3-70B-Instruct', pricing: PRICE },
        ],
      },
    ],
  });
  gw = await startGateway({ sim, catalogue });
  const created = await gw.createKey({ rateLimitRpm: 10_000 });
  keyId = created.id;
  ({ a, b } = openAiClients(gw, created.key));
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await sim?.close();
});
beforeEach(() => resetProviders(sim));

type ApiError = InstanceType<typeof OpenAI.APIError>;
type Params = Omit<OpenAI.Chat.ChatCompletionCreateParamsNonStreaming, 'model' | 'messages'>;
const messages = [{ role: 'user' as const, content: 'What is the weather in Paris?' }];
const variants = () =>
  [
    ['A', a],
    ['B', b],
  ] as const;
const last = () => sim.providers.cohere?.stats().last;
const sentBody = () => last()?.body as Record<string, unknown>;
const chats = (id: string) => sim.providers[id]?.stats().byEndpoint.chat ?? 0;

const WEATHER: OpenAI.Chat.ChatCompletionTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

async function ask(client: OpenAI, model: string, params: Params = {}) {
  const { data, response } = await client.chat.completions.create({ model, messages, ...params }).withResponse();
  return { data, provider: response.headers.get('x-gateway-provider') };
}

const fail = (client: OpenAI, model: string, params: Params) =>
  client.chat.completions.create({ model, messages, ...params }).then(
    () => {
      throw new Error('expected an error');
    },
    (e: unknown) => e as ApiError,
  );

async function recordsOfKey() {
  await gw.gateway.services.usage.flush();
  return gw.gateway.services.store.usage.list({ keyId });
}

describe('the simulated compatibility API refuses what Cohere does not list', () => {
  it('answers 400 in its {id, message} shape for each field, and for a reasoning_effort other than none or high', async () => {
    const p = sim.providers.cohere;
    if (!p) throw new Error('no cohere');
    const post = (body: Record<string, unknown>) =>
      fetch(`${p.url}/compatibility/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${p.apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: UPSTREAM, messages, ...body }),
      });
    for (const [field, value] of [
      ['max_completion_tokens', 10],
      ['stream_options', { include_usage: true }],
      ['parallel_tool_calls', true],
      ['n', 1],
      ['store', false],
      ['reasoning_effort', 'low'],
    ] as const) {
      const res = await post({ [field]: value, stream: field === 'stream_options' });
      expect(res.status, field).toBe(400);
      const body = (await res.json()) as Record<string, unknown>;
      expect(Object.keys(body).sort()).toEqual(['id', 'message']);
      expect(body['message']).toMatch(field);
    }
    expect((await post({ reasoning_effort: 'high', max_tokens: 5 })).status).toBe(200);
    // No OpenAI models list on the compatibility path: the gateway reads Cohere's native one.
    expect((await fetch(`${p.url}/compatibility/v1/models`, { headers: { authorization: `Bearer ${p.apiKey}` } })).status).toBe(404);
  });
});

describe('embeddings through Cohere’s compatibility API', () => {
  it('answers the OpenAI SDK in both variants from its /embeddings', async () => {
    for (const [variant, client] of variants()) {
      const res = await client.embeddings.create({ model: EMBED, input: ['hello world', 'bonjour'] });
      expect(
        res.data.map((d) => d.embedding.length),
        variant,
      ).toEqual([1024, 1024]);
      expect(res.usage.prompt_tokens).toBe(5);
      expect(last()?.path).toBe('/compatibility/v1/embeddings');
    }
  });
});

describe('chat through Cohere’s compatibility API', () => {
  it('answers in both variants, from a model the gateway found in Cohere’s native list, billed at its usage', async () => {
    for (const [variant, client] of variants()) {
      const got = await ask(client, COMMAND, { max_completion_tokens: 40 });
      expect(got.provider, variant).toBe('cohere-compat');
      expect(got.data.choices[0]?.message.content).toMatch(/^Simulated answer from cohere/);
      expect(got.data.choices[0]?.finish_reason).toBe('stop');
      expect(got.data.usage?.completion_tokens).toBeGreaterThan(0);
      expect(last()?.path).toBe('/compatibility/v1/chat/completions');
      // Its list does not name max_completion_tokens: sent as max_tokens.
      expect(sentBody()).toMatchObject({ model: UPSTREAM, max_tokens: 40 });
      expect(sentBody()).not.toHaveProperty('max_completion_tokens');
    }
    const models = await a.models.list();
    expect(models.data.map((m) => m.id)).toContain(COMMAND);
  });

  it('sends the larger cap when both are given, the one the budget is held for', async () => {
    await ask(b, COMMAND, { max_tokens: 10, max_completion_tokens: 30 });
    expect(sentBody()['max_tokens']).toBe(30);
    expect(sentBody()).not.toHaveProperty('max_completion_tokens');
  });

  it('streams in both variants without stream_options, billed at the gateway’s estimate since Cohere reports no usage', async () => {
    for (const [variant, client] of variants()) {
      const before = (await recordsOfKey()).length;
      const stream = await client.chat.completions.create({ model: COMMAND, messages, stream: true, stream_options: { include_usage: true } });
      let text = '';
      let finish: string | null = null;
      let usage: OpenAI.CompletionUsage | undefined;
      for await (const chunk of stream) {
        text += chunk.choices[0]?.delta.content ?? '';
        finish = chunk.choices[0]?.finish_reason ?? finish;
        if (chunk.usage) usage = chunk.usage;
      }
      expect(text, variant).toMatch(/^Simulated answer from cohere/);
      expect(finish).toBe('stop');
      expect(sentBody()).toMatchObject({ stream: true });
      expect(sentBody()).not.toHaveProperty('stream_options');
      const prompt = estimatePromptTokens({ messages });
      const completion = Math.ceil(text.length / 4);
      expect(usage).toEqual({ prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion });
      const records = await recordsOfKey();
      expect(records.length).toBe(before + 1);
      const record = records.find((r) => r.promptTokens === prompt && r.completionTokens === completion && r.provider === 'cohere-compat');
      expect(record?.cost).toBeCloseTo((prompt * 2.5 + completion * 10) / 1e6, 9);
    }
  });

  it('calls tools, answered and streamed, and takes the results back', async () => {
    for (const [variant, client] of variants()) {
      const got = await ask(client, COMMAND, { tools: [WEATHER] });
      const call = got.data.choices[0]?.message.tool_calls?.[0];
      expect(got.data.choices[0]?.finish_reason, variant).toBe('tool_calls');
      expect(call?.type === 'function' ? call.function.name : null).toBe('get_weather');
      const args = JSON.parse(call?.type === 'function' ? call.function.arguments : '{}') as { city?: unknown };
      expect(typeof args.city).toBe('string');

      const stream = await client.chat.completions.create({ model: COMMAND, messages, tools: [WEATHER], stream: true });
      let name = '';
      let streamedArgs = '';
      let finish: string | null = null;
      for await (const chunk of stream) {
        const delta = chunk.choices[0]?.delta.tool_calls?.[0];
        name += delta?.function?.name ?? '';
        streamedArgs += delta?.function?.arguments ?? '';
        finish = chunk.choices[0]?.finish_reason ?? finish;
      }
      expect(name).toBe('get_weather');
      expect(JSON.parse(streamedArgs)).toHaveProperty('city');
      expect(finish).toBe('tool_calls');

      const answer = await client.chat.completions.create({
        model: COMMAND,
        messages: [
          ...messages,
          { role: 'assistant', content: null, tool_calls: [{ id: call?.id ?? 'x', type: 'function', function: { name: 'get_weather', arguments: '{}' } }] },
          { role: 'tool', tool_call_id: call?.id ?? 'x', content: 'Sunny, 24 degrees' },
        ],
        tools: [WEATHER],
      });
      expect(answer.choices[0]?.message.content).toContain('Sunny');
    }
  });
});

describe('fields Cohere’s compatibility API refuses', () => {
  it('leaves out those that do not change the answer, and neutral values of the others', async () => {
    for (const [variant, client] of variants()) {
      const got = await ask(client, COMMAND, {
        store: true,
        metadata: { team: 'a' },
        service_tier: 'auto',
        prediction: { type: 'content', content: 'Sunny' },
        parallel_tool_calls: true,
        n: 1,
        top_logprobs: 0,
        logit_bias: {},
        modalities: ['text'],
        tools: [WEATHER],
      });
      expect(got.provider, variant).toBe('cohere-compat');
      const sent = sentBody();
      for (const key of ['store', 'metadata', 'service_tier', 'prediction', 'parallel_tool_calls', 'n', 'top_logprobs', 'logit_bias', 'modalities']) {
        expect(sent, key).not.toHaveProperty(key);
      }
    }
  });

  it('sends reasoning_effort as the on it knows', async () => {
    await ask(a, COMMAND, { reasoning_effort: 'low' });
    expect(sentBody()['reasoning_effort']).toBe('high');
    await ask(b, COMMAND, { reasoning_effort: 'medium' });
    expect(sentBody()['reasoning_effort']).toBe('high');
  });

  it('routes around the provider for a field that changes the answer: parallel_tool_calls false, n > 1, logit_bias…', async () => {
    for (const params of [
      { parallel_tool_calls: false, tools: [WEATHER] },
      { n: 2 },
      { top_logprobs: 2, logprobs: true },
      { logit_bias: { '42': -100 } },
      { modalities: ['text', 'audio'] as ('text' | 'audio')[] },
    ] satisfies Params[]) {
      for (const [variant, client] of variants()) {
        const before = chats('cohere');
        const field = Object.keys(params)[0] as string;
        const err = await fail(client, COMMAND, params);
        expect(err.status, `${variant} ${field}`).toBe(400);
        expect(err.param).toBe(field);
        expect(err.code).toBe(variant === 'A' ? 'validation_error' : 'invalid_request');
        expect(err.message).toContain(`any provider serving '${COMMAND}'`);
        if (field !== 'modalities') expect((await ask(client, DUO, params)).provider).toBe('nebius');
        expect(chats('cohere')).toBe(before);
      }
    }
  });
});

describe('Cohere’s errors', () => {
  it('a 429 in its {id, message} shape is the provider failing, with its wait passed on (its words, of the gateway’s account, are not)', async () => {
    for (const [variant, client] of variants()) {
      sim.providers.cohere?.setFault({ kind: 'status', status: 429, retryAfter: 3, times: 1 });
      const err = await fail(client, `test/${WAITING[variant]}`, {});
      expect(err.status, variant).toBe(502);
      expect(err.code).toBe(variant === 'A' ? 'provider_down' : 'upstream_unavailable');
      expect(err.message).toContain(`${WAITING[variant]} answered 429: it is limiting the gateway's requests`);
      expect(err.message).not.toContain('You are past the rate limit');
      expect(err.headers?.get('retry-after')).toBe('3');
    }
  });

  it('498, a deny-listed key, is the gateway’s key refused, not a message to pass on', async () => {
    for (const [variant, client] of variants()) {
      sim.providers.cohere?.setFault({ kind: 'status', status: 498, message: 'invalid api token: deny-listed', times: 1 });
      const err = await fail(client, COMMAND, {});
      expect(err.message, variant).toContain("refused the gateway's credentials");
      expect(err.message).not.toContain('deny-listed');
    }
  });
});
