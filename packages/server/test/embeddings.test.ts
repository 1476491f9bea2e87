import { type Simulator, startSimulator } from '@gw/simulator';
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { eventually, resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';
import { openAiClients } from './helpers/sdk.js';

let sim: Simulator;
let gw: TestGateway;
let key: string;
let a: OpenAI;
let b: OpenAI;

// Azure serves an embeddings deployment in this catalogue, so every adapter with embeddings is reached.
const AZURE_MODEL = 'openai/text-embedding-3-small';
// Cohere first (batches of 96 texts), OVH after it.
const COHERE_THEN_OVH = 'test/embed-cohere-ovh';
// A provider that ignores (Scaleway) or refuses (Cohere's compatibility API) `dimensions` first, one that honours it after.
const SCALEWAY_THEN_OVH = 'test/embed-scaleway-ovh';
const COMPAT_THEN_NEBIUS = 'test/embed-compat-nebius';
// Cohere's compatibility API alone: no offer can shorten its vectors.
const COMPAT_ONLY = 'test/embed-compat';
// Mistral's native API (vectors up to 1,024 long) first, Azure's text-embedding-3-small (up to 1,536) after it.
const MISTRAL_THEN_AZURE = 'test/embed-mistral-azure';
// OVH's bge-m3 (vectors up to 1,024 long, larger sizes refused) first, Azure's text-embedding-3-small after it.
const OVH_THEN_AZURE = 'test/embed-ovh-azure';
const PRICE = { prompt_per_1m: 0.01, completion_per_1m: 0, currency: 'EUR' as const };

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  sim.providers.azure?.setModels([...(sim.providers.azure?.models() ?? []), 'text-embedding-3-small']);
  const cohere = sim.providers.cohere;
  if (!cohere) throw new Error('no cohere');
  gw = await startGateway({
    sim,
    catalogue: (c) => ({
      ...c,
      providers: [
        ...c.providers,
        { id: 'cohere-compat', type: 'openai', vendor: 'cohere', baseUrl: `${cohere.url}/compatibility/v1`, apiKey: cohere.apiKey, region: 'eu' },
      ],
      models: [
        ...c.models,
        {
          id: AZURE_MODEL,
          kind: 'embedding',
          owned_by: 'openai',
          offers: [{ provider: 'azure', upstreamModel: 'text-embedding-3-small', pricing: { prompt_per_1m: 0.02, completion_per_1m: 0, currency: 'EUR' } }],
        },
        {
          id: COHERE_THEN_OVH,
          kind: 'embedding',
          owned_by: 'test',
          offers: [
            { provider: 'cohere', upstreamModel: 'embed-multilingual-v3.0', pricing: { prompt_per_1m: 0.1, completion_per_1m: 0, currency: 'EUR' } },
            { provider: 'ovh', upstreamModel: 'bge-m3', pricing: { prompt_per_1m: 0.01, completion_per_1m: 0, currency: 'EUR' } },
          ],
        },
        {
          id: SCALEWAY_THEN_OVH,
          kind: 'embedding',
          owned_by: 'test',
          offers: [
            { provider: 'scaleway', upstreamModel: 'bge-multilingual-gemma2', pricing: PRICE },
            { provider: 'ovh', upstreamModel: 'bge-m3', pricing: PRICE },
          ],
        },
        {
          id: COMPAT_THEN_NEBIUS,
          kind: 'embedding',
          owned_by: 'test',
          beta: true,
          offers: [
            { provider: 'cohere-compat', upstreamModel: 'embed-multilingual-v3.0', pricing: PRICE },
            { provider: 'nebius', upstreamModel: 'BAAI/bge-m3', pricing: PRICE },
          ],
        },
        {
          id: COMPAT_ONLY,
          kind: 'embedding',
          owned_by: 'test',
          beta: true,
          offers: [{ provider: 'cohere-compat', upstreamModel: 'embed-multilingual-v3.0', pricing: PRICE }],
        },
        {
          id: MISTRAL_THEN_AZURE,
          kind: 'embedding',
          owned_by: 'test',
          beta: true,
          offers: [
            { provider: 'mistral', upstreamModel: 'mistral-embed', pricing: PRICE },
            { provider: 'azure', upstreamModel: 'text-embedding-3-small', pricing: PRICE },
          ],
        },
        {
          id: OVH_THEN_AZURE,
          kind: 'embedding',
          owned_by: 'test',
          beta: true,
          offers: [
            { provider: 'ovh', upstreamModel: 'bge-m3', pricing: PRICE },
            { provider: 'azure', upstreamModel: 'text-embedding-3-small', pricing: PRICE },
          ],
        },
      ],
    }),
  });
  key = (await gw.createKey({ rateLimitRpm: 10_000 })).key;
  ({ a, b } = openAiClients(gw, key));
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await sim?.close();
});
beforeEach(() => resetProviders(sim));

const norm = (v: ArrayLike<number>) => Math.sqrt(Array.from(v).reduce((n, x) => n + x * x, 0));

async function post(base: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${base}/embeddings`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  return {
    status: res.status,
    headers: res.headers,
    body: (await res.json()) as Record<string, unknown> & { error?: { code: string; message: string; param: string | null } },
  };
}

describe('POST /v1/embeddings through the official openai SDK', () => {
  it('embeds a string (the SDK asks for base64 and decodes it) in OpenAI list shape, with usage and routing headers', async () => {
    const { data, response } = await a.embeddings.create({ model: 'baai/bge-m3', input: 'Bonjour Paris' }).withResponse();
    expect(data.object).toBe('list');
    expect(data.model).toBe('baai/bge-m3');
    expect(data.data).toHaveLength(1);
    expect(data.data[0]).toMatchObject({ object: 'embedding', index: 0 });
    expect(data.data[0]?.embedding).toHaveLength(1024);
    expect(norm(data.data[0]?.embedding ?? [])).toBeCloseTo(1, 4);
    expect(data.usage).toEqual({ prompt_tokens: 4, total_tokens: 4 });
    expect(response.headers.get('x-gateway-provider')).toBe('ovh');
    expect((sim.providers.ovh?.stats().last?.body as { encoding_format: string } | undefined)?.encoding_format).toBe('float');
  });

  it('embeds an array of strings in input order, as floats or as base64 of the same little-endian float32 values', async () => {
    const input = ['alpha', 'beta gamma', 'delta'];
    const floats = await a.embeddings.create({ model: 'baai/bge-m3', input, encoding_format: 'float' });
    expect(floats.data.map((d) => d.index)).toEqual([0, 1, 2]);
    expect(floats.data.every((d) => Array.isArray(d.embedding) && d.embedding.length === 1024)).toBe(true);
    const raw = await post(gw.baseA, { model: 'baai/bge-m3', input, encoding_format: 'base64' });
    const data = raw.body.data as { embedding: string }[];
    expect(typeof data[1]?.embedding).toBe('string');
    const bytes = Buffer.from(data[1]?.embedding ?? '', 'base64');
    expect(bytes.length).toBe(1024 * 4);
    expect(bytes.readFloatLE(8)).toBeCloseTo(floats.data[1]?.embedding[2] ?? Number.NaN, 6);
  });

  it('serves every adapter with embeddings: OpenAI-compatible, Mistral, Cohere (embed v2) and Azure (deployment URL)', async () => {
    for (const [model, provider, dim] of [
      ['baai/bge-multilingual-gemma2', 'scaleway', 3584],
      ['mistral/embed', 'mistral', 1024],
      ['cohere/embed-multilingual-v3', 'cohere', 1024],
      [AZURE_MODEL, 'azure', 1536],
    ] as const) {
      const { data, response } = await a.embeddings.create({ model, input: ['one text', 'another'] }).withResponse();
      expect(response.headers.get('x-gateway-provider'), model).toBe(provider);
      expect(data.data.map((d) => d.embedding.length)).toEqual([dim, dim]);
      expect(data.usage.prompt_tokens).toBeGreaterThan(0);
    }
    expect(sim.providers.cohere?.stats().last?.path).toBe('/v2/embed');
    expect(sim.providers.cohere?.stats().last?.body).toMatchObject({
      texts: ['one text', 'another'],
      input_type: 'search_document',
      embedding_types: ['float'],
    });
    expect(sim.providers.azure?.stats().last?.path).toBe('/openai/deployments/text-embedding-3-small/embeddings');
    expect(sim.providers.azure?.stats().last?.headers['api-key']).toBe(sim.providers.azure?.apiKey);
  });

  it('passes dimensions to providers that support it, under each provider’s own name', async () => {
    const ovh = await a.embeddings.create({ model: 'baai/bge-m3', input: 'x', dimensions: 256 });
    expect(ovh.data[0]?.embedding).toHaveLength(256);
    expect((sim.providers.ovh?.stats().last?.body as Record<string, unknown> | undefined)?.dimensions).toBe(256);
    const mistral = await a.embeddings.create({ model: 'mistral/embed', input: 'x', dimensions: 512 });
    expect(mistral.data[0]?.embedding).toHaveLength(512);
    const sent = sim.providers.mistral?.stats().last?.body as Record<string, unknown>;
    expect(sent.output_dimension).toBe(512);
    expect(sent.dimensions).toBeUndefined();
    const azure = await a.embeddings.create({ model: AZURE_MODEL, input: 'x', dimensions: 64 });
    expect(azure.data[0]?.embedding).toHaveLength(64);
  });

  it('answers a clear 400 where the model cannot shorten its vectors, whether the provider refuses or silently ignores dimensions', async () => {
    const cohere = await post(gw.baseA, { model: 'cohere/embed-multilingual-v3', input: 'x', dimensions: 256 });
    expect(cohere.status).toBe(400);
    expect(cohere.body.error?.code).toBe('validation_error');
    expect(cohere.body.error?.message).toContain('output_dimension is not supported');
    // Scaleway ignores dimensions and answers full-size vectors: refused, never passed on.
    const scaleway = await post(gw.baseA, { model: 'baai/bge-multilingual-gemma2', input: 'x', dimensions: 256 }, { 'x-gateway-provider': 'scaleway' });
    expect(scaleway.status).toBe(400);
    expect(scaleway.body.error?.message).toContain("does not support 'dimensions'");
    // Scaleway answered (and billed) the vectors the gateway then refused: the refusal's record carries them.
    await gw.gateway.services.usage.flush();
    const [paid] = await gw.gateway.services.store.usage.list({ requestId: scaleway.headers.get('x-request-id') as string });
    expect(paid).toMatchObject({ provider: 'scaleway', status: 400 });
    expect(paid?.promptTokens).toBeGreaterThan(0);
    expect(paid?.cost).toBeCloseTo(((paid?.promptTokens ?? 0) * 0.1) / 1e6, 15);
    const calls = sim.providers.scaleway?.stats().total ?? 0;
    const again = await post(gw.baseA, { model: 'baai/bge-multilingual-gemma2', input: 'x', dimensions: 128 });
    expect(again.status).toBe(400);
    // Learned: the second refusal costs no upstream call.
    expect(sim.providers.scaleway?.stats().total).toBe(calls);
    // The size it answers anyway is still served: only a size it cannot give is refused.
    const native = await post(gw.baseA, { model: 'baai/bge-multilingual-gemma2', input: 'x', dimensions: 3584 }, { 'x-gateway-provider': 'scaleway' });
    expect(native.status).toBe(200);
    expect((native.body as unknown as { data: { embedding: number[] }[] }).data[0]?.embedding).toHaveLength(3584);
  });

  it('routes dimensions around a provider that ignores or refuses it, to one that honours it, without calling the first', async () => {
    const before = { scaleway: sim.providers.scaleway?.stats().total ?? 0, cohere: sim.providers.cohere?.stats().total ?? 0 };
    for (const [model, provider] of [
      [SCALEWAY_THEN_OVH, 'ovh'],
      [COMPAT_THEN_NEBIUS, 'nebius'],
    ] as const) {
      const { data, response } = await a.embeddings.create({ model, input: ['x', 'y'], dimensions: 256 }).withResponse();
      expect([model, response.headers.get('x-gateway-provider'), data.data[0]?.embedding.length]).toEqual([model, provider, 256]);
      // Without dimensions, the configured order stands.
      const whole = await a.embeddings.create({ model, input: 'x' }).withResponse();
      expect(whole.response.headers.get('x-gateway-provider')).not.toBe(provider);
    }
    // Variant B too (its embeddings beta).
    const beta = await b.embeddings.create({ model: COMPAT_THEN_NEBIUS, input: 'x', dimensions: 128 }).withResponse();
    expect([beta.response.headers.get('x-gateway-provider'), beta.data.data[0]?.embedding.length]).toEqual(['nebius', 128]);
    // Each was asked only the requests without dimensions.
    expect(sim.providers.scaleway?.stats().total).toBe(before.scaleway + 1);
    expect(sim.providers.cohere?.stats().total).toBe(before.cohere + 1);
  });

  it.each([
    ['A', 'validation_error', () => a],
    ['B', 'invalid_request', () => b],
  ])('variant %s: dimensions no offer (or pinned one) can give is the gateway’s own 400 naming it, no upstream call', async (_v, code, client) => {
    const calls = sim.providers.cohere?.stats().total ?? 0;
    for (const [model, headers] of [
      [COMPAT_ONLY, {}],
      [COMPAT_THEN_NEBIUS, { 'x-gateway-provider': 'cohere-compat' }],
    ] as const) {
      const err = (await client()
        .embeddings.create({ model, input: 'x', dimensions: 256 }, { headers })
        .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.BadRequestError>;
      expect(err, model).toBeInstanceOf(OpenAI.BadRequestError);
      expect({ model, code: err.code, param: err.param }).toEqual({ model, code, param: 'dimensions' });
      expect(err.message).toContain("'dimensions' is not supported by");
    }
    expect(sim.providers.cohere?.stats().total).toBe(calls);
  });

  it("fails over from a native API's refusal of the size asked (Cohere's, Mistral's) to a provider that gives it, the first time", async () => {
    const calls = () => [sim.providers.cohere?.stats().total ?? 0, sim.providers.mistral?.stats().total ?? 0];
    const before = calls();
    const cases = [
      // Cohere's v3 models give no other size (400 "output_dimension is not supported by …"); 256 was refused above.
      [a, COHERE_THEN_OVH, 384, 'ovh'],
      // Mistral's vectors are at most 1,024 long; Azure's text-embedding-3-small gives 1,200.
      [a, MISTRAL_THEN_AZURE, 1200, 'azure'],
      [b, MISTRAL_THEN_AZURE, 1100, 'azure'],
    ] as const;
    for (const [client, model, dimensions, provider] of cases) {
      const { data, response } = await client.embeddings.create({ model, input: ['x', 'y'], dimensions }).withResponse();
      expect([model, response.headers.get('x-gateway-provider'), data.data.map((d) => d.embedding.length)]).toEqual([
        model,
        provider,
        [dimensions, dimensions],
      ]);
    }
    // Each native API was asked, and refused.
    expect(calls()).toEqual([(before[0] ?? 0) + 1, (before[1] ?? 0) + 2]);
    // A refusal of the size is no failure of the provider: without dimensions, the configured order stands.
    const whole = await a.embeddings.create({ model: COHERE_THEN_OVH, input: 'x' }).withResponse();
    expect(whole.response.headers.get('x-gateway-provider')).toBe('cohere');
  });

  it("remembers a provider's refusal of a size: a later request of that size makes no call to it, and is served at once", async () => {
    const calls = () => [sim.providers.cohere?.stats().total ?? 0, sim.providers.mistral?.stats().total ?? 0, sim.providers.ovh?.stats().total ?? 0];
    const served = async (client: OpenAI, model: string, dimensions: number) => {
      const { data, response } = await client.embeddings.create({ model, input: 'x', dimensions }).withResponse();
      expect(data.data[0]?.embedding).toHaveLength(dimensions);
      return response.headers.get('x-gateway-provider');
    };
    const start = calls();
    // The native APIs (Cohere's, Mistral's) and an OpenAI-compatible host (OVH).
    expect(await served(a, COHERE_THEN_OVH, 320)).toBe('ovh');
    expect(await served(a, MISTRAL_THEN_AZURE, 1300)).toBe('azure');
    expect(await served(a, OVH_THEN_AZURE, 1200)).toBe('azure');
    // Each refused the size once (OVH served 320 above: one call more).
    const once = [(start[0] ?? 0) + 1, (start[1] ?? 0) + 1, (start[2] ?? 0) + 2];
    expect(calls()).toEqual(once);
    // The same sizes again, in either variant: the offers that refused them are planned around, with no call.
    expect(await served(a, MISTRAL_THEN_AZURE, 1300)).toBe('azure');
    expect(await served(b, MISTRAL_THEN_AZURE, 1300)).toBe('azure');
    expect(await served(a, OVH_THEN_AZURE, 1200)).toBe('azure');
    expect(await served(b, OVH_THEN_AZURE, 1200)).toBe('azure');
    expect(calls()).toEqual(once);
    expect(await served(a, COHERE_THEN_OVH, 320)).toBe('ovh');
    once[2] = (once[2] ?? 0) + 1;
    expect(calls()).toEqual(once);
    // Where that offer is the model's only one, the refusal is the gateway's own 400 naming the field, with no call.
    const only = (await a.embeddings.create({ model: 'mistral/embed', input: 'x', dimensions: 1300 }).catch((e: unknown) => e)) as InstanceType<
      typeof OpenAI.BadRequestError
    >;
    expect(only).toBeInstanceOf(OpenAI.BadRequestError);
    expect([only.param, only.message]).toEqual(['dimensions', expect.stringContaining("'dimensions' is not supported by")]);
    expect(calls()).toEqual(once);
    // Only that size: one the model gives is still Mistral's.
    expect(await served(a, MISTRAL_THEN_AZURE, 512)).toBe('mistral');
  });

  it.each([
    ['A', 'validation_error', () => a, 5000],
    ['B', 'invalid_request', () => b, 5001],
  ])('variant %s: a size no provider of the model gives, each refusing it, is a 400 naming `dimensions`', async (_v, code, client, dimensions) => {
    // A size of its own in each variant: one refused before is planned around (the test above), with no provider asked.
    const err = (await client()
      .embeddings.create({ model: MISTRAL_THEN_AZURE, input: 'x', dimensions })
      .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.BadRequestError>;
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect({ code: err.code, param: err.param }).toEqual({ code, param: 'dimensions' });
    expect(err.message).toContain('azure answered 400');
  });

  it.each([
    ['A', 'validation_error', () => a],
    ['B', 'invalid_request', () => b],
  ])('variant %s: a size the model cannot give is refused naming `dimensions` as param, as the SDK reads it', async (_v, code, client) => {
    const refusals: [string, number][] = [
      ['mistral/embed', 5000], // Mistral refuses its output_dimension
      ['baai/bge-m3', 5000], // OVH refuses dimensions
      ['cohere/embed-multilingual-v3', 256], // Cohere refuses output_dimension for a model that cannot shorten
    ];
    // Scaleway ignores dimensions: the gateway's own refusal (variant B does not serve this model).
    if (_v === 'A') refusals.push(['baai/bge-multilingual-gemma2', 256]);
    for (const [model, dimensions] of refusals) {
      const err = (await client()
        .embeddings.create({ model, input: 'x', dimensions })
        .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.BadRequestError>;
      expect(err, model).toBeInstanceOf(OpenAI.BadRequestError);
      expect({ model, code: err.code, param: err.param }).toEqual({ model, code, param: 'dimensions' });
    }
  });

  it.each([
    ['A', 'validation_error', () => a],
    ['B', 'invalid_request', () => b],
  ])('variant %s: an input longer than the model’s context is the provider’s 400, not failed over, not billed', async (_v, code, client) => {
    const input = 'word '.repeat(40_000); // 50,000 tokens as the demo providers count, over the 8,192 of each model below
    const cases: [string, string, string | null, string][] = [
      ['mistral/embed', 'mistral', null, 'Too many tokens in input. Max is 8192 got 50000'],
      ['baai/bge-m3', 'ovh', 'nebius', "This model's maximum context length is 8192 tokens"],
      ['baai/bge-m3', 'nebius', 'ovh', "This model's maximum context length is 8192 tokens"],
      ['baai/bge-multilingual-gemma2', 'scaleway', null, "This model's maximum context length is 8192 tokens"],
    ];
    // Variant B serves only the beta embeddings models.
    for (const [model, provider, other, message] of cases.filter(([m]) => _v === 'A' || m !== 'baai/bge-multilingual-gemma2')) {
      resetProviders(sim);
      const own = await gw.createKey({ rateLimitRpm: 10_000 });
      const err = (await client()
        .withOptions({ apiKey: own.key, maxRetries: 0 })
        .embeddings.create({ model, input }, { headers: { 'x-gateway-provider': provider } })
        .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.BadRequestError>;
      expect(err, `${model} on ${provider}`).toBeInstanceOf(OpenAI.BadRequestError);
      expect({ model, provider, code: err.code }).toEqual({ model, provider, code });
      expect(err.message).toContain(message);
      // The client's fault: one call, no other provider tried.
      expect(sim.providers[provider]?.stats().total).toBe(1);
      if (other) expect(sim.providers[other]?.stats().total).toBe(0);
      await gw.gateway.services.usage.flush();
      const records = await gw.gateway.services.store.usage.list({ keyId: own.id });
      expect(records.map((r) => [r.status, r.cost, r.promptTokens])).toEqual([[400, 0, 0]]);
      expect((await gw.admin<{ spent: number }>('GET', `/keys/${own.id}`)).body.spent).toBe(0);
    }
    // Without a pin too: the first offer's refusal is the answer.
    resetProviders(sim);
    const unpinned = (await client()
      .embeddings.create({ model: 'baai/bge-m3', input })
      .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.BadRequestError>;
    expect(unpinned.status).toBe(400);
    expect((sim.providers.ovh?.stats().total ?? 0) + (sim.providers.nebius?.stats().total ?? 0)).toBe(1);
  });

  it('Cohere cuts an input longer than the model’s context to its start and bills what it kept: a 200 with that usage', async () => {
    const long = `${'a'.repeat(2048)}${'b'.repeat(2048)}`; // 1,024 tokens as the demo providers count; the model's context is 512
    const { data, response } = await a.embeddings.create({ model: 'cohere/embed-multilingual-v3', input: [long, 'hello world'] }).withResponse();
    expect(data.usage).toEqual({ prompt_tokens: 512 + 3, total_tokens: 512 + 3 });
    expect(sim.providers.cohere?.stats().last?.body).toMatchObject({ texts: [long, 'hello world'], truncate: 'END' });
    // The start it kept is what was embedded.
    const start = await a.embeddings.create({ model: 'cohere/embed-multilingual-v3', input: 'a'.repeat(2048) });
    expect(data.data[0]?.embedding).toEqual(start.data[0]?.embedding);
    await gw.gateway.services.usage.flush();
    const [record] = await gw.gateway.services.store.usage.list({ requestId: response.headers.get('x-request-id') as string });
    expect(record).toMatchObject({ provider: 'cohere', status: 200, promptTokens: 515 });
  });

  it('a budget hold counts a text longer than the model’s context as the context, as Cohere bills it', async () => {
    // 60 documents of about 6,300 tokens at 3 characters a token, cut by Cohere to 512: a hold of €0.038 uncapped, €0.0031 billed.
    const documents = Array.from({ length: 60 }, (_, i) => `chapter ${i} of a long report `.repeat(700));
    const budgeted = await gw.createKey({ rateLimitRpm: 10_000, budget: 0.01 });
    const sdk = new OpenAI({ apiKey: budgeted.key, baseURL: gw.baseA, maxRetries: 0 });
    const answer = await sdk.embeddings.create({ model: 'cohere/embed-multilingual-v3', input: documents });
    expect(answer.usage.prompt_tokens).toBe(60 * 512);
    await gw.gateway.services.usage.flush();
    const spent = (await gw.admin<{ spent: number }>('GET', `/keys/${budgeted.id}`)).body.spent;
    expect(spent).toBeCloseTo((60 * 512 * 0.1) / 1e6, 12);
  });

  it('token ids for input (LangChain sends them by default) are refused saying text is wanted, not that an id must be a string', async () => {
    for (const [client, code] of [
      [a, 'validation_error'],
      [b, 'invalid_request'],
    ] as const) {
      for (const input of [
        [1, 2, 3],
        [[1, 2], [3]],
      ]) {
        const err = await client.embeddings.create({ model: 'baai/bge-m3', input }).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(OpenAI.BadRequestError);
        const refused = err as InstanceType<typeof OpenAI.BadRequestError>;
        expect([refused.status, refused.code, refused.param, refused.message]).toEqual([
          400,
          code,
          'input',
          "400 Invalid body: 'input' must be text, a string or a list of strings: token ids (lists of integers) are not taken; send the text itself.",
        ]);
      }
    }
  });

  it('takes null for the optional fields as not given, as OpenAI does (LiteLLM and Dify send encoding_format: null)', async () => {
    for (const [base, model, provider] of [
      [gw.baseA, 'baai/bge-m3', 'ovh'],
      [gw.baseB, 'mistral/embed', 'mistral'],
    ] as const) {
      const nulls = { encoding_format: null, dimensions: null, user: null, input_type: null };
      const res = await post(base, { model, input: ['one', 'two'], ...nulls });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      const data = res.body['data'] as { index: number; embedding: number[] }[];
      // Floats, OpenAI's default, at the model's own size.
      expect(data.map((d) => [d.index, Array.isArray(d.embedding), d.embedding.length])).toEqual([
        [0, true, 1024],
        [1, true, 1024],
      ]);
      // No null reached the provider, which may refuse one (vLLM's strict schema does).
      const sent = sim.providers[provider]?.stats().last?.body as Record<string, unknown>;
      expect(Object.entries(sent).filter(([, v]) => v === null)).toEqual([]);
    }
  });

  it('validates the body: input, encoding_format, dimensions and unknown fields', async () => {
    for (const [body, param] of [
      [{ model: 'baai/bge-m3', input: [] }, 'input'],
      [{ model: 'baai/bge-m3', input: [1, 2, 3] }, 'input'],
      [{ model: 'baai/bge-m3', input: ['a', 2] }, 'input.1'],
      // Nothing to embed is refused, as OpenAI does, rather than billed.
      [{ model: 'baai/bge-m3', input: '' }, 'input'],
      [{ model: 'baai/bge-m3', input: ['a', ''] }, 'input.1'],
      [{ model: 'baai/bge-m3', input: 'x', encoding_format: 'int8' }, 'encoding_format'],
      [{ model: 'baai/bge-m3', input: 'x', dimensions: 0 }, 'dimensions'],
      [{ model: 'baai/bge-m3', input: 'x', dimension: 5 }, 'dimension'],
      [{ input: 'x' }, 'model'],
    ] as const) {
      const res = await post(gw.baseA, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.error?.param, JSON.stringify(body)).toBe(param);
    }
    const chatModel = await post(gw.baseA, { model: 'mistral/small', input: 'x' });
    expect([chatModel.status, chatModel.body.error?.code]).toEqual([400, 'validation_error']);
    const unknown = await post(gw.baseA, { model: 'nobody/nothing', input: 'x' });
    expect([unknown.status, unknown.body.error?.code]).toEqual([404, 'model_not_found']);
  });

  it('fails over to the next provider, and bills the tokens of the provider that served', async () => {
    sim.providers.ovh?.setFault({ kind: 'status', status: 503, retryAfter: null });
    const { data, response } = await b.embeddings.create({ model: 'baai/bge-m3', input: 'a text of some length for billing' }).withResponse();
    expect(response.headers.get('x-gateway-provider')).toBe('nebius');
    expect(response.headers.get('x-gateway-routing-hops')).toBe('1');
    const requestId = response.headers.get('x-request-id') as string;
    await gw.gateway.services.usage.flush();
    const [record] = await gw.gateway.services.store.usage.list({ requestId });
    expect(record).toMatchObject({ kind: 'embedding', model: 'baai/bge-m3', provider: 'nebius', status: 200, promptTokens: data.usage.prompt_tokens });
    expect(record?.cost).toBeCloseTo((data.usage.prompt_tokens * 0.01) / 1e6, 15);
  });
});

describe('a request served by several upstream calls is billed every call the provider was paid for', () => {
  // 150 texts: Cohere takes them in two calls, 96 and 54.
  const texts = Array.from({ length: 150 }, (_, i) => `document number ${i} about the weather in Lyon`);

  async function embedWith(apiKey: string, body: unknown, headers: Record<string, string> = {}) {
    const res = await fetch(`${gw.baseA}/embeddings`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });
    const json = (await res.json()) as { usage?: { prompt_tokens: number }; error?: { code: string } };
    return { status: res.status, requestId: res.headers.get('x-request-id') as string, provider: res.headers.get('x-gateway-provider'), json };
  }

  /** Tokens the provider counts for these texts, from an answer that succeeded. */
  async function tokensAt(model: string, input: string[], provider: string): Promise<number> {
    const res = await embedWith(key, { model, input }, { 'x-gateway-provider': provider });
    expect(res.status).toBe(200);
    return res.json.usage?.prompt_tokens ?? 0;
  }

  async function recordAndSpent(requestId: string, keyId: string) {
    await gw.gateway.services.usage.flush();
    const [record] = await gw.gateway.services.store.usage.list({ requestId });
    const spent = (await gw.admin<{ spent: number }>('GET', `/keys/${keyId}`)).body.spent;
    return { record, spent };
  }

  it('Cohere’s second batch fails after the first was paid: the error’s usage record and the key’s spend carry the first', async () => {
    const firstBatch = await tokensAt('cohere/embed-multilingual-v3', texts.slice(0, 96), 'cohere');
    expect(firstBatch).toBeGreaterThan(0);
    const budgeted = await gw.createKey({ rateLimitRpm: 10_000, budget: 5 });
    const before = sim.providers.cohere?.stats().byEndpoint['embeddings'] ?? 0;
    sim.providers.cohere?.setFault({ kind: 'status', status: 503, retryAfter: null, skip: 1, times: 1, endpoints: ['embeddings'] });
    const res = await embedWith(budgeted.key, { model: 'cohere/embed-multilingual-v3', input: texts });
    expect([res.status, res.json.error?.code]).toEqual([502, 'provider_down']);
    expect(sim.providers.cohere?.stats().byEndpoint['embeddings']).toBe(before + 2);
    const { record, spent } = await recordAndSpent(res.requestId, budgeted.id);
    expect(record).toMatchObject({ kind: 'embedding', provider: 'cohere', status: 502, promptTokens: firstBatch, keyId: budgeted.id });
    expect(record?.cost).toBeCloseTo((firstBatch * 0.1) / 1e6, 15);
    expect(spent).toBeCloseTo((firstBatch * 0.1) / 1e6, 15);
  });

  it('a failover after Cohere’s first batch was paid bills that batch and the answer of the offer that served, once', async () => {
    const firstBatch = await tokensAt(COHERE_THEN_OVH, texts.slice(0, 96), 'cohere');
    const atOvh = await tokensAt(COHERE_THEN_OVH, texts, 'ovh');
    const budgeted = await gw.createKey({ rateLimitRpm: 10_000, budget: 5 });
    sim.providers.cohere?.setFault({ kind: 'status', status: 503, retryAfter: null, skip: 1, times: 1, endpoints: ['embeddings'] });
    const res = await embedWith(budgeted.key, { model: COHERE_THEN_OVH, input: texts });
    expect([res.status, res.provider]).toEqual([200, 'ovh']);
    // The answer's usage is what the request is billed.
    expect(res.json.usage?.prompt_tokens).toBe(firstBatch + atOvh);
    const { record, spent } = await recordAndSpent(res.requestId, budgeted.id);
    const cost = (firstBatch * 0.1 + atOvh * 0.01) / 1e6;
    expect(record).toMatchObject({ provider: 'ovh', status: 200, promptTokens: firstBatch + atOvh });
    expect(record?.cost).toBeCloseTo(cost, 15);
    expect(spent).toBeCloseTo(cost, 15);
  });
  it('Cohere answering every batch: the request is billed each batch once', async () => {
    const [first, second] = [
      await tokensAt('cohere/embed-multilingual-v3', texts.slice(0, 96), 'cohere'),
      await tokensAt('cohere/embed-multilingual-v3', texts.slice(96), 'cohere'),
    ];
    const budgeted = await gw.createKey({ rateLimitRpm: 10_000, budget: 5 });
    const res = await embedWith(budgeted.key, { model: 'cohere/embed-multilingual-v3', input: texts });
    expect([res.status, res.json.usage?.prompt_tokens]).toEqual([200, first + second]);
    const { record, spent } = await recordAndSpent(res.requestId, budgeted.id);
    expect(record).toMatchObject({ provider: 'cohere', status: 200, promptTokens: first + second });
    expect(spent).toBeCloseTo(((first + second) * 0.1) / 1e6, 15);
  });

  it('a client that leaves while Cohere’s second batch runs: the 499’s record and the key’s spend carry the first, paid batch', async () => {
    const firstBatch = await tokensAt('cohere/embed-multilingual-v3', texts.slice(0, 96), 'cohere');
    const budgeted = await gw.createKey({ rateLimitRpm: 10_000, budget: 5 });
    const before = sim.providers.cohere?.stats().byEndpoint['embeddings'] ?? 0;
    // The first call answers; the second is never answered, so the client gives up while it runs.
    sim.providers.cohere?.setFault({ kind: 'hang', skip: 1, times: 1, endpoints: ['embeddings'] });
    const leaving = new AbortController();
    const sent = fetch(`${gw.baseA}/embeddings`, {
      method: 'POST',
      headers: { authorization: `Bearer ${budgeted.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'cohere/embed-multilingual-v3', input: texts }),
      signal: leaving.signal,
    }).catch(() => null);
    await eventually(() => expect(sim.providers.cohere?.stats().byEndpoint['embeddings']).toBe(before + 2), 5_000);
    leaving.abort();
    await sent;
    const record = await (async () => {
      for (;;) {
        await gw.gateway.services.usage.flush();
        const rows = await gw.gateway.services.store.usage.list({ keyId: budgeted.id });
        if (rows.length > 0) return rows[0];
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    expect(record).toMatchObject({ kind: 'embedding', provider: 'cohere', status: 499, promptTokens: firstBatch });
    expect(record?.cost).toBeCloseTo((firstBatch * 0.1) / 1e6, 15);
    const spent = (await gw.admin<{ spent: number }>('GET', `/keys/${budgeted.id}`)).body.spent;
    expect(spent).toBeCloseTo((firstBatch * 0.1) / 1e6, 15);
  });
});

describe('Mistral’s limit of 16,384 tokens a call: a larger batch is sent in calls that each fit', () => {
  // 100 chunks of 500 tokens (as the simulator counts): 50,000 tokens, over three times Mistral's limit.
  const chunks = Array.from({ length: 100 }, (_, i) => `chunk ${String(i).padStart(3, '0')} `.padEnd(2000, 'abcd'));

  async function recordOf(requestId: string) {
    await gw.gateway.services.usage.flush();
    const [record] = await gw.gateway.services.store.usage.list({ requestId });
    return record;
  }

  it('answers every input in order, with the vectors each gets alone and the usage of all the calls', async () => {
    const { data, response } = await a.embeddings.create({ model: 'mistral/embed', input: chunks }).withResponse();
    expect(data.data.map((d) => d.index)).toEqual(chunks.map((_, i) => i));
    expect(data.usage).toEqual({ prompt_tokens: 50_000, total_tokens: 50_000 });
    // At one token per 3 characters, 24 chunks a call: 5 calls, none refused.
    expect(sim.providers.mistral?.stats().byEndpoint['embeddings']).toBe(5);
    for (const i of [0, 23, 24, 99]) {
      const alone = await a.embeddings.create({ model: 'mistral/embed', input: chunks[i] as string });
      expect(data.data[i]?.embedding, `input ${i}`).toEqual(alone.data[0]?.embedding);
    }
    const record = await recordOf(response.headers.get('x-request-id') as string);
    expect(record).toMatchObject({ provider: 'mistral', status: 200, promptTokens: 50_000 });
    expect(record?.cost).toBeCloseTo((50_000 * 0.1) / 1e6, 15);
  });

  it('a call that fails after others were paid: the error’s record carries the paid calls', async () => {
    sim.providers.mistral?.setFault({ kind: 'status', status: 503, retryAfter: null, skip: 1, times: 1, endpoints: ['embeddings'] });
    const res = await post(gw.baseA, { model: 'mistral/embed', input: chunks });
    expect([res.status, res.body.error?.code]).toEqual([502, 'provider_down']);
    expect(sim.providers.mistral?.stats().byEndpoint['embeddings']).toBe(2);
    // The first call held chunks 0-23: 24 × 500 tokens.
    const record = await recordOf(res.headers.get('x-request-id') as string);
    expect(record).toMatchObject({ provider: 'mistral', status: 502, promptTokens: 12_000 });
  });

  it('an input over the model’s context among them is Mistral’s 400, sent first, so no call was paid', async () => {
    const input = [...chunks.slice(0, 60), 'word '.repeat(8000), ...chunks.slice(60)]; // 10,000 tokens at index 60
    const own = await gw.createKey({ rateLimitRpm: 10_000 });
    const err = (await a
      .withOptions({ apiKey: own.key, maxRetries: 0 })
      .embeddings.create({ model: 'mistral/embed', input })
      .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.BadRequestError>;
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect(err.message).toContain('Too many tokens in input. Max is 8192 got 10000');
    expect(sim.providers.mistral?.stats().byEndpoint['embeddings']).toBe(1);
    await gw.gateway.services.usage.flush();
    const records = await gw.gateway.services.store.usage.list({ keyId: own.id });
    expect(records.map((r) => [r.status, r.cost, r.promptTokens])).toEqual([[400, 0, 0]]);
  });
});

describe('a host’s cap on the body (OVHcloud’s 2 MB) below the gateway’s: the inputs are sent in halves', () => {
  // 600 texts of 4,000 characters (1,000 tokens each as the simulator counts): 2.4 MB, over OVHcloud's 2 MB, within 4 MiB.
  const texts = Array.from({ length: 600 }, (_, i) => `text ${String(i).padStart(3, '0')} `.padEnd(4000, 'abcd'));

  async function recordsOf(requestId: string) {
    await gw.gateway.services.usage.flush();
    return gw.gateway.services.store.usage.list({ requestId });
  }

  it('OVHcloud’s 413 is followed by two calls that fit: every input in order, its own vector, the usage of both, billed once', async () => {
    const { data, response } = await a.embeddings.create({ model: 'baai/bge-m3', input: texts }, { headers: { 'x-gateway-provider': 'ovh' } }).withResponse();
    expect(response.headers.get('x-gateway-provider')).toBe('ovh');
    expect(data.data.map((d) => d.index)).toEqual(texts.map((_, i) => i));
    expect(data.usage).toEqual({ prompt_tokens: 600_000, total_tokens: 600_000 });
    expect(sim.providers.ovh?.stats().byStatus).toEqual({ '200': 2, '413': 1 });
    expect(sim.providers.nebius?.stats().total).toBe(0);
    for (const i of [0, 299, 300, 599]) {
      const alone = await a.embeddings.create({ model: 'baai/bge-m3', input: texts[i] as string }, { headers: { 'x-gateway-provider': 'ovh' } });
      expect(data.data[i]?.embedding, `input ${i}`).toEqual(alone.data[0]?.embedding);
    }
    const records = await recordsOf(response.headers.get('x-request-id') as string);
    expect(records.map((r) => [r.provider, r.status, r.promptTokens])).toEqual([['ovh', 200, 600_000]]);
    expect(records[0]?.cost).toBeCloseTo((600_000 * 0.01) / 1e6, 15);
  });

  it('a half that fails after the other was paid fails over whole: that half and the next offer’s answer billed, once', async () => {
    sim.providers.ovh?.setFault({ kind: 'status', status: 503, retryAfter: null, skip: 1, times: 1, endpoints: ['embeddings'] });
    const { data, response } = await a.embeddings.create({ model: OVH_THEN_AZURE, input: texts }).withResponse();
    expect(response.headers.get('x-gateway-provider')).toBe('azure');
    expect(data.data).toHaveLength(600);
    expect(data.data.every((d, i) => d.index === i && d.embedding.length === 1536)).toBe(true);
    expect(sim.providers.ovh?.stats().byStatus).toEqual({ '200': 1, '413': 1, '503': 1 });
    const paidHalf = 300_000;
    const azure = (data.usage.prompt_tokens as number) - paidHalf;
    expect(azure).toBeGreaterThan(0);
    const records = await recordsOf(response.headers.get('x-request-id') as string);
    expect(records).toHaveLength(1);
    expect(records[0]).toMatchObject({ status: 200, promptTokens: paidHalf + azure });
    expect(records[0]?.cost).toBeCloseTo(((paidHalf + azure) * 0.01) / 1e6, 15);
  });
});

describe('variant B: embeddings are a private beta', () => {
  it('serves the models marked beta and refuses the others as model_not_found', async () => {
    const ok = await b.embeddings.create({ model: 'mistral/embed', input: 'x' });
    expect(ok.data).toHaveLength(1);
    const err = (await b.embeddings.create({ model: 'baai/bge-multilingual-gemma2', input: 'x' }).catch((e: unknown) => e)) as InstanceType<
      typeof OpenAI.APIError
    >;
    expect(err.status).toBe(400);
    expect(err.code).toBe('model_not_found');
    expect(err.message).toContain('embeddings beta');
    // Like any model_not_found, it is not counted against the key's limit.
    const limited = await gw.createKey({ rateLimitRpm: 2 });
    const bLimited = new OpenAI({ apiKey: limited.key, baseURL: gw.baseB, maxRetries: 0 });
    for (let i = 0; i < 3; i++) {
      const refused = (await bLimited.embeddings.create({ model: 'baai/bge-multilingual-gemma2', input: 'x' }).catch((e: unknown) => e)) as { status: number };
      expect(refused.status).toBe(400);
    }
    expect((await bLimited.embeddings.create({ model: 'mistral/embed', input: 'x' })).data).toHaveLength(1);
    // Variant A lists embeddings as a normal endpoint.
    expect((await a.embeddings.create({ model: 'baai/bge-multilingual-gemma2', input: 'x' })).data).toHaveLength(1);
  });
});
