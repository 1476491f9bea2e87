import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';
import { openAiClients } from './helpers/sdk.js';

const MODEL = 'meta/llama-3.3-70b';
let gw: TestGateway;
let key: string;
let a: OpenAI;
let b: OpenAI;

beforeAll(async () => {
  gw = await startGateway({
    catalogue: (c) => ({ ...c, providers: c.providers.map((p) => (p.id === 'nebius' ? { ...p, timeoutMs: 400 } : p)) }),
  });
  key = (await gw.createKey({ name: 'chat test' })).key;
  ({ a, b } = openAiClients(gw, key));
});
afterAll(() => gw?.close());
beforeEach(() => {
  for (const p of Object.values(gw.sim.providers)) {
    p.clearFaults();
    p.resetStats();
  }
});

const ask = { model: MODEL, messages: [{ role: 'user' as const, content: 'Say bonjour to Paris' }] };

describe('chat completions through the official openai SDK', () => {
  it('a prompt over the model’s context is the provider’s 400 in each variant’s envelope, with no failover and nothing billed', async () => {
    const { id, key: own } = await gw.createKey({ name: 'over context', budget: 100 });
    const clients = openAiClients(gw, own);
    const long = [{ role: 'user' as const, content: 'abcd '.repeat(110_000) }]; // about 137,500 tokens, over 131,072
    for (const [client, code] of [
      [clients.a, 'validation_error'],
      [clients.b, 'invalid_request'],
    ] as const) {
      const err = (await client.chat.completions.create({ model: MODEL, messages: long }).catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
      expect([err.status, err.code]).toEqual([400, code]);
      expect(err.message).toContain('maximum context length is 131072 tokens');
    }
    expect([gw.sim.providers.scaleway?.stats().total, gw.sim.providers.ovh?.stats().total, gw.sim.providers.nebius?.stats().total]).toEqual([2, 0, 0]);
    const after = await gw.admin<{ spent: number }>('GET', `/keys/${id}`);
    expect(after.body.spent).toBe(0);
  });

  it('variant A answers in OpenAI shape with the gateway model id and the routing headers', async () => {
    const { data, response } = await a.chat.completions.create(ask).withResponse();
    expect(data.object).toBe('chat.completion');
    expect(data.model).toBe(MODEL);
    expect(data.choices[0]?.message.content).toMatch(/\S/);
    // The provider (vLLM) answers an empty tool_calls list; OpenAI leaves the field out when there are none.
    expect(data.choices[0]?.message).not.toHaveProperty('tool_calls');
    expect(data.usage?.total_tokens).toBeGreaterThan(0);
    const requestId = response.headers.get('x-request-id') ?? '';
    expect(requestId).toMatch(/^req_[0-9a-f]{28}$/);
    // Time-ordered: the id starts with the milliseconds at which the request came (the usage table's key grows at its end).
    expect(Math.abs(Number.parseInt(requestId.slice(4, 16), 16) - Date.now())).toBeLessThan(10_000);
    expect(response.headers.get('x-gateway-provider')).toBe('scaleway');
    expect(response.headers.get('x-gateway-region')).toBeNull();
    expect(response.headers.get('server-timing')).toMatch(/^gw;desc="gateway";dur=[\d.]+, upstream;dur=[\d.]+, total;dur=[\d.]+$/);
  });

  it('variant B adds region, strategy and hops', async () => {
    const { response } = await b.chat.completions.create(ask).withResponse();
    expect(response.headers.get('x-gateway-provider')).toBe('scaleway');
    expect(response.headers.get('x-gateway-region')).toBe(gw.sim.providers.scaleway?.region);
    expect(response.headers.get('x-gateway-strategy')).toBe('default');
    expect(response.headers.get('x-gateway-routing-hops')).toBe('0');
  });

  it('sends the provider its own key and model name, never the client key', async () => {
    await a.chat.completions.create(ask);
    const last = gw.sim.providers.scaleway?.stats().last;
    expect(last?.headers.authorization).toBe(`Bearer ${gw.sim.providers.scaleway?.apiKey ?? ''}`);
    expect(JSON.stringify(last?.headers)).not.toContain(key);
    expect((last?.body as { model: string } | undefined)?.model).toBe('llama-3.3-70b-instruct');
  });

  it('sends the API’s sampling defaults (temperature 1, top_p 1) when the request leaves them out, and the request’s own otherwise', async () => {
    const sent = async (extra: Record<string, unknown>, provider: string) => {
      await a.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], ...extra }, { headers: { 'X-Gateway-Provider': provider } });
      return gw.sim.providers[provider]?.stats().last?.body as Record<string, unknown>;
    };
    expect(await sent({}, 'scaleway')).toMatchObject({ temperature: 1, top_p: 1 });
    expect(await sent({ temperature: 0.2 }, 'ovh')).toMatchObject({ temperature: 0.2, top_p: 1 });
  });

  it('writes one usage record per request with tokens, cost, provider and latency', async () => {
    const { data, response } = await a.chat.completions.create(ask).withResponse();
    const requestId = response.headers.get('x-request-id') as string;
    await gw.gateway.services.usage.flush();
    const records = await gw.gateway.services.store.usage.list({ requestId });
    expect(records).toHaveLength(1);
    const r = records[0];
    expect(r?.model).toBe(MODEL);
    expect(r?.provider).toBe('scaleway');
    expect(r?.status).toBe(200);
    expect(r?.promptTokens).toBe(data.usage?.prompt_tokens);
    expect(r?.completionTokens).toBe(data.usage?.completion_tokens);
    const expected = ((data.usage?.prompt_tokens ?? 0) * 0.8 + (data.usage?.completion_tokens ?? 0) * 0.95) / 1e6;
    expect(r?.cost).toBeCloseTo(expected, 12);
    expect(r?.latencyMs).toBeGreaterThanOrEqual(0);
  });

  it('fails over to the next provider on an upstream 5xx', async () => {
    gw.sim.providers.scaleway?.setFault({ kind: 'status', status: 503, retryAfter: null });
    const { response } = await b.chat.completions.create(ask).withResponse();
    expect(response.headers.get('x-gateway-provider')).toBe('ovh');
    expect(response.headers.get('x-gateway-routing-hops')).toBe('1');
  });

  it('answers 502 provider_down (A) / upstream_unavailable (B) when no provider is left', async () => {
    gw.sim.providers.scaleway?.setFault({ kind: 'status', status: 500 });
    const pinned = { headers: { 'X-Gateway-Provider': 'scaleway' } };
    const errA = await a.chat.completions.create(ask, pinned).catch((e: unknown) => e);
    expect(errA).toBeInstanceOf(OpenAI.InternalServerError);
    expect((errA as InstanceType<typeof OpenAI.APIError>).status).toBe(502);
    expect((errA as InstanceType<typeof OpenAI.APIError>).code).toBe('provider_down');
    const errB = await b.chat.completions.create(ask, pinned).catch((e: unknown) => e);
    expect((errB as InstanceType<typeof OpenAI.APIError>).status).toBe(502);
    expect((errB as InstanceType<typeof OpenAI.APIError>).code).toBe('upstream_unavailable');
    expect(gw.sim.providers.ovh?.stats().total).toBe(0);
  });

  it('answers 504 upstream_timeout when the provider does not answer in time', async () => {
    gw.sim.providers.nebius?.setFault({ kind: 'hang' });
    for (const client of [a, b]) {
      const err = (await client.chat.completions.create(ask, { headers: { 'X-Gateway-Provider': 'nebius' } }).catch((e: unknown) => e)) as InstanceType<
        typeof OpenAI.APIError
      >;
      expect(err.status).toBe(504);
      expect(err.code).toBe('upstream_timeout');
    }
  });

  it('ends the upstream call when the client leaves before the answer, and tries no other provider', async () => {
    const scaleway = gw.sim.providers.scaleway;
    scaleway?.setFault({ kind: 'hang' });
    const left = new AbortController();
    const call = a.chat.completions.create(ask, { signal: left.signal }).catch((e: unknown) => e);
    await until(() => scaleway?.stats().inFlight === 1);
    left.abort();
    expect(await call).toBeInstanceOf(OpenAI.APIUserAbortError);
    // The hung request ends only because the gateway ended it (its provider timeout is far away).
    await until(() => scaleway?.stats().inFlight === 0);
    expect(scaleway?.stats().total).toBe(1);
    expect(gw.sim.providers.ovh?.stats().total).toBe(0);
    expect(gw.sim.providers.nebius?.stats().total).toBe(0);
  });
});

async function until(done: () => boolean, timeoutMs = 3000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!done()) {
    if (Date.now() > end) throw new Error('timed out waiting for the condition');
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('models', () => {
  it('variant A lists models with kind and filters by kind', async () => {
    const page = await a.models.list();
    const ids = page.data.map((m) => m.id);
    expect(ids).toContain(MODEL);
    expect(ids).not.toContain('mistral/nemo');
    const chat = page.data.find((m) => m.id === MODEL) as unknown as Record<string, unknown>;
    expect(chat).toMatchObject({ object: 'model', kind: 'chat', owned_by: 'meta' });
    const res = await fetch(`${gw.baseA}/models?kind=embedding`, { headers: { authorization: `Bearer ${key}` } });
    const body = (await res.json()) as { data: { kind: string }[] };
    expect(body.data.length).toBeGreaterThan(0);
    expect(body.data.every((m) => m.kind === 'embedding')).toBe(true);
  });

  it('variant B lists providers, regions, capabilities, context window and pricing', async () => {
    const page = await b.models.list();
    const m = page.data.find((x) => x.id === MODEL) as unknown as Record<string, unknown>;
    expect(m.providers).toEqual(['scaleway', 'ovh', 'nebius']);
    expect((m.regions as string[]).length).toBe(3);
    expect(m.context_window).toBeGreaterThan(0);
    expect(m.pricing).toEqual({ prompt_per_1m: 0.8, completion_per_1m: 0.95, currency: 'EUR' });
    expect(m.kind).toBeUndefined();
    // SPEC gives `object` to variant A's model only.
    expect(m.object).toBeUndefined();
    // Models billed per unit show that price, which would otherwise read as free.
    const byId = (id: string) => (page.data.find((x) => x.id === id) as unknown as { pricing: Record<string, unknown> }).pricing;
    expect(byId('cohere/rerank-v3.5')).toMatchObject({ prompt_per_1m: 0, per_unit: 0.0019, unit: 'search_unit' });
    expect(byId('openai/whisper-large-v3')).toMatchObject({ per_unit: 0.00005, unit: 'audio_second' });
  });

  it('gets one model with the slash encoded as %2F, in both variants', async () => {
    for (const base of [gw.baseA, gw.baseB]) {
      const res = await fetch(`${base}/models/${encodeURIComponent(MODEL)}`, { headers: { authorization: `Bearer ${key}` } });
      expect(res.status).toBe(200);
      expect(((await res.json()) as { id: string }).id).toBe(MODEL);
    }
    const viaSdk = await a.models.retrieve(MODEL);
    expect(viaSdk.id).toBe(MODEL);
  });

  it('gets one model with the slash unencoded too (a proxy that decodes %2F sends that), uncounted; double-encoded is another id', async () => {
    const limited = (await gw.createKey({ rateLimitRpm: 1 })).key;
    const auth = { headers: { authorization: `Bearer ${limited}` } };
    for (const base of [gw.baseA, gw.baseB]) {
      for (let i = 0; i < 3; i++) {
        const res = await fetch(`${base}/models/${MODEL}`, auth);
        expect(res.status).toBe(200);
        expect(((await res.json()) as { id: string }).id).toBe(MODEL);
      }
    }
    const unknown = await fetch(`${gw.baseB}/models/meta/nothing`, auth);
    expect([unknown.status, ((await unknown.json()) as { error: { code: string } }).error.code]).toEqual([400, 'model_not_found']);
    const twice = await fetch(`${gw.baseB}/models/meta%252Fllama-3.3-70b`, auth);
    expect(twice.status).toBe(400);
    // Another id, not served as the one meant; but told which one that is.
    expect(((await twice.json()) as { error: { message: string } }).error.message).toBe(
      "The model 'meta%2Fllama-3.3-70b' does not exist. Did you mean 'meta/llama-3.3-70b'? Model ids are '<family>/<model>', as GET /alt/v1/models lists them.",
    );
  });
});
