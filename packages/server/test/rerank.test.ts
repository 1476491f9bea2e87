import { type Simulator, startSimulator } from '@gw/simulator';
import { Cohere, CohereClient, CohereClientV2, type CohereError } from 'cohere-ai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';

const MODEL = 'cohere/rerank-v3.5';
// Served by Cohere (rerank v2) and, as a fallback, by Scaleway's Jina-style /v1/rerank.
const TWO_PROVIDERS = 'test/rerank-two';
// Served by Scaleway alone, whose rerank has no max_tokens_per_doc.
const SCALEWAY_ONLY = 'test/rerank-scaleway';

let sim: Simulator;
let gw: TestGateway;
let key: string;
let coA: CohereClient;
let coB: CohereClient;

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  gw = await startGateway({
    sim,
    catalogue: (c) => ({
      ...c,
      models: [
        ...c.models,
        {
          id: TWO_PROVIDERS,
          kind: 'rerank',
          owned_by: 'test',
          offers: [
            { provider: 'cohere', upstreamModel: 'rerank-v3.5', pricing: { prompt_per_1m: 0, completion_per_1m: 0, currency: 'EUR', per_unit: 0.002 } },
            {
              provider: 'scaleway',
              upstreamModel: 'bge-multilingual-gemma2',
              pricing: { prompt_per_1m: 0, completion_per_1m: 0, currency: 'EUR', per_unit: 0.001 },
            },
          ],
        },
        {
          id: SCALEWAY_ONLY,
          kind: 'rerank',
          owned_by: 'test',
          offers: [
            {
              provider: 'scaleway',
              upstreamModel: 'bge-multilingual-gemma2',
              pricing: { prompt_per_1m: 0, completion_per_1m: 0, currency: 'EUR', per_unit: 0.001 },
            },
          ],
        },
      ],
    }),
  });
  key = (await gw.createKey({ rateLimitRpm: 10_000 })).key;
  // Cohere's own SDK, pointed at the gateway's base address (it appends /v1/rerank).
  coA = new CohereClient({ token: key, environment: gw.url, maxRetries: 0 });
  coB = new CohereClient({ token: key, environment: `${gw.url}/alt`, maxRetries: 0 });
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await sim?.close();
});
beforeEach(() => resetProviders(sim));

const documents = [
  'Berlin is the capital of Germany.',
  'Paris is the capital and largest city of France.',
  'The Loire is the longest river in France.',
  'Capital punishment is a legal penalty.',
];
const query = 'What is the capital of France?';

function post(base: string, body: unknown, headers: Record<string, string> = {}) {
  return fetch(`${base}/rerank`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
}

describe("POST /v1/rerank through Cohere's own SDK", () => {
  it.each([
    ['A', () => coA],
    ['B', () => coB],
  ])('variant %s: sorted results with index, relevance score, echoed documents and billed search units', async (_v, client) => {
    const { data, rawResponse } = await client().rerank({ model: MODEL, query, documents, topN: 3, returnDocuments: true }).withRawResponse();
    expect(data.id).toMatch(/\S/);
    expect(data.results).toHaveLength(3);
    expect(data.results[0]?.index).toBe(1);
    const scores = data.results.map((r) => r.relevanceScore);
    expect([...scores].sort((x, y) => y - x)).toEqual(scores);
    expect(scores.every((s) => s >= 0 && s <= 1)).toBe(true);
    expect(data.results[0]?.document?.text).toBe(documents[1]);
    expect(data.meta?.billedUnits?.searchUnits).toBe(1);
    expect(rawResponse.headers.get('x-gateway-provider')).toBe('cohere');
    const sent = sim.providers.cohere?.stats().last;
    expect(sent?.path).toBe('/v2/rerank');
    expect(sent?.body).toEqual({ model: 'rerank-v3.5', query, documents, top_n: 3 });
  });

  it('takes more than 1,000 documents, which Cohere only recommends against, from its SDK in both variants, on Cohere and on Scaleway', async () => {
    const many = Array.from({ length: 1500 }, (_, i) => `document ${i} about ${i === 1234 ? 'Paris, the capital of France' : 'rivers'}`);
    for (const [variant, client] of [
      ['A', coA],
      ['B', coB],
    ] as const) {
      for (const [model, provider] of [
        [MODEL, 'cohere'],
        [SCALEWAY_ONLY, 'scaleway'],
      ] as const) {
        const { data, rawResponse } = await client.rerank({ model, query, documents: many, topN: 3 }).withRawResponse();
        expect([variant, provider, rawResponse.headers.get('x-gateway-provider'), data.results.length]).toEqual([variant, provider, provider, 3]);
        expect(data.results.every((r) => r.index >= 0 && r.index < 1500)).toBe(true);
        // Cohere's rule: one search unit per 100 documents.
        expect(data.meta?.billedUnits?.searchUnits).toBe(15);
        const sent = sim.providers[provider]?.stats().last?.body as { documents?: unknown[] } | undefined;
        expect(sent?.documents).toHaveLength(1500);
      }
    }
  });

  it('answers Cohere’s current SDK (CohereClientV2), which posts to /v2/rerank, in both variants', async () => {
    for (const base of [gw.url, `${gw.url}/alt`]) {
      const v2 = new CohereClientV2({ token: key, environment: base, maxRetries: 0 });
      const answer = await v2.rerank({ model: MODEL, query, documents, topN: 2 });
      expect(answer.results.map((r) => r.index)).toEqual([1, 0]);
      expect(answer.meta?.billedUnits?.searchUnits).toBe(1);
      expect(answer.meta?.apiVersion?.version).toBe('2');
      // Its errors reach the SDK's classes as well.
      const err = (await v2.rerank({ model: 'nobody/nothing', query, documents }).catch((e: unknown) => e)) as CohereError;
      expect([400, 404]).toContain(err.statusCode);
    }
  });

  it('takes the SDK’s `priority` (Cohere’s scheduling hint, 0-999) in both variants, and does not send it on', async () => {
    for (const base of [gw.url, `${gw.url}/alt`]) {
      const v2 = new CohereClientV2({ token: key, environment: base, maxRetries: 0 });
      const answer = await v2.rerank({ model: MODEL, query, documents, topN: 2, priority: 5 });
      expect(answer.results.map((r) => r.index)).toEqual([1, 0]);
      expect(sim.providers.cohere?.stats().last?.body).toEqual({ model: 'rerank-v3.5', query, documents, top_n: 2 });
      // Outside Cohere's range it is refused as Cohere refuses it, naming the field.
      const err = (await v2.rerank({ model: MODEL, query, documents, priority: 1000 }).catch((e: unknown) => e)) as CohereError;
      expect(err.statusCode).toBe(400);
      expect((err.body as { error: { param: string } }).error.param).toBe('priority');
    }
  });

  it('Cohere’s embed and chat through its SDK are 404s that say where those requests are served, in both variants, with no upstream call', async () => {
    for (const [base, mount] of [
      [gw.url, '/v1'],
      [`${gw.url}/alt`, '/alt/v1'],
    ] as const) {
      const v1 = new CohereClient({ token: key, environment: base });
      const v2 = new CohereClientV2({ token: key, environment: base });
      for (const call of [
        () => v1.embed({ model: 'cohere/embed-multilingual-v3', texts: ['hello'], inputType: 'search_document' }),
        () => v2.embed({ model: 'cohere/embed-multilingual-v3', texts: ['hello'], inputType: 'search_document', embeddingTypes: ['float'] }),
      ]) {
        const err = (await call().catch((e: unknown) => e)) as CohereError;
        expect(err.statusCode).toBe(404);
        const message = (err.body as { error: { message: string } }).error.message;
        expect(message).toContain(`embeddings are at POST ${mount}/embeddings in OpenAI's shape`);
      }
      for (const call of [
        () => v1.chat({ model: 'cohere/command-r', message: 'hello' }),
        () => v2.chat({ model: 'cohere/command-r', messages: [{ role: 'user', content: 'hello' }] }),
      ]) {
        const err = (await call().catch((e: unknown) => e)) as CohereError;
        expect(err.statusCode).toBe(404);
        const message = (err.body as { error: { message: string } }).error.message;
        expect(message).toContain(`chat is at POST ${mount}/chat/completions in OpenAI's shape`);
      }
    }
    expect(sim.providers.cohere?.stats().total).toBe(0);
  });

  it('takes Cohere’s object documents, ranking `text` or the named rank_fields', async () => {
    const docs = [
      { title: 'Germany', text: 'Berlin is a city in Germany.' },
      { title: 'France capital', text: 'Paris is the capital of France.' },
    ];
    const byText = await coA.rerank({ model: MODEL, query, documents: docs, returnDocuments: true });
    expect(byText.results[0]?.index).toBe(1);
    expect(byText.results[0]?.document).toEqual(docs[1]);
    const byFields = await coA.rerank({ model: MODEL, query: 'France', documents: docs, rankFields: ['title'] });
    expect(byFields.results).toHaveLength(2);
    expect((sim.providers.cohere?.stats().last?.body as { documents: string[] } | undefined)?.documents).toEqual(['title: Germany', 'title: France capital']);
    expect(byFields.results[0]?.document).toBeUndefined();
    // Only a document's own fields: every object has a `toString`, no document has it as a field.
    const inherited = await fetch(`${gw.baseA}/rerank`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, query, documents: [{ text: 'a' }], rank_fields: ['toString'] }),
    });
    expect(inherited.status).toBe(400);
  });

  it('maps errors onto the SDK’s classes: unknown model 404 (A) / 400 (B), bad input 400, provider down 502', async () => {
    await expect(coA.rerank({ model: 'nobody/nothing', query, documents })).rejects.toBeInstanceOf(Cohere.NotFoundError);
    const b = await coB.rerank({ model: 'nobody/nothing', query, documents }).catch((e: unknown) => e);
    expect(b).toBeInstanceOf(Cohere.BadRequestError);
    expect(((b as CohereError).body as { error: { code: string } }).error.code).toBe('model_not_found');
    await expect(coA.rerank({ model: MODEL, query, documents: [] })).rejects.toBeInstanceOf(Cohere.BadRequestError);
    sim.providers.cohere?.setFault({ kind: 'status', status: 503, retryAfter: null });
    const down = await coA.rerank({ model: MODEL, query, documents }).catch((e: unknown) => e);
    expect((down as CohereError).statusCode).toBe(502);
    expect(((down as CohereError).body as { error: { code: string } }).error.code).toBe('provider_down');
  });
});

describe('POST /v1/rerank on the wire', () => {
  it('validates documents, top_n and unknown fields, naming the field', async () => {
    for (const [body, param] of [
      [{ model: MODEL, query, documents: [{ title: 'no text' }] }, 'documents.0.text'],
      [{ model: MODEL, query, documents: ['a', 'b'], top_n: 0 }, 'top_n'],
      [{ model: MODEL, query: '', documents: ['a'] }, 'query'],
      [{ model: MODEL, query, documents: ['a'], max_chunks_per_doc: 3 }, 'max_chunks_per_doc'],
      [{ model: 'mistral/embed', query, documents: ['a'] }, 'model'],
    ] as const) {
      const res = await post(gw.baseA, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(((await res.json()) as { error: { param: string } }).error.param, JSON.stringify(body)).toBe(param);
    }
    // Cohere's v1 SDK still sends its chunk count: told which field takes its place.
    const v1 = await post(gw.baseA, { model: MODEL, query, documents: ['a'], max_chunks_per_doc: 3 });
    expect(((await v1.json()) as { error: { message: string } }).error.message).toContain("'max_tokens_per_doc' (its v2 field)");
  });

  it('refuses a top_n or max_tokens_per_doc past a 32-bit count naming it, whichever provider would serve it', async () => {
    for (const base of [gw.baseA, gw.baseB]) {
      for (const [field, value] of [
        ['top_n', 1e300],
        ['top_n', 2 ** 31],
        ['max_tokens_per_doc', 1e300],
        ['max_tokens_per_doc', 2 ** 31],
      ] as const) {
        for (const model of [MODEL, TWO_PROVIDERS, SCALEWAY_ONLY]) {
          const res = await post(base, { model, query, documents, [field]: value });
          const body = (await res.json()) as { error: { param: string; message: string } };
          expect([base, model, res.status, body.error.param, body.error.message]).toEqual([
            base,
            model,
            400,
            field,
            `Invalid body: '${field}' must be <= 2147483647.`,
          ]);
        }
      }
    }
    expect((sim.providers.cohere?.stats().total ?? 0) + (sim.providers.scaleway?.stats().total ?? 0)).toBe(0);
  });

  it('sends a top_n above the number of documents as that number, to Cohere and to a Jina-style rerank alike, and answers every document', async () => {
    for (const provider of ['cohere', 'scaleway']) {
      const res = await post(gw.baseA, { model: TWO_PROVIDERS, query, documents, top_n: 2 ** 31 - 1 }, { 'x-gateway-provider': provider });
      const answer = (await res.json()) as { results: { index: number }[] };
      expect([provider, res.status, answer.results.map((r) => r.index).sort()]).toEqual([provider, 200, [0, 1, 2, 3]]);
      expect((sim.providers[provider]?.stats().last?.body as { top_n?: unknown } | undefined)?.top_n).toBe(documents.length);
    }
  });

  it('takes a null optional field as not given, as Cohere does (its v4 Python SDK sends top_n and max_chunks_per_doc so)', async () => {
    // The body cohere<5's Client.rerank posts when top_n is not set.
    const sdkV4 = { query, documents: documents.map((text) => ({ text })), model: MODEL, top_n: null, return_documents: false, max_chunks_per_doc: null };
    const allNull = { model: MODEL, query, documents, top_n: null, return_documents: null, rank_fields: null, max_tokens_per_doc: null, priority: null };
    for (const base of [gw.baseA, gw.baseB]) {
      for (const body of [sdkV4, allNull]) {
        const res = await post(base, body);
        const answer = (await res.json()) as { results: { index: number; document?: unknown }[] };
        expect(res.status, `${base} ${JSON.stringify(answer)}`).toBe(200);
        // Every document ranked, none echoed: what leaving the fields out gives.
        expect(answer.results.map((r) => r.index).sort()).toEqual([0, 1, 2, 3]);
        expect(answer.results.every((r) => r.document === undefined)).toBe(true);
        const sent = sim.providers.cohere?.stats().last?.body as Record<string, unknown>;
        expect(sent).not.toHaveProperty('top_n');
        expect(sent).not.toHaveProperty('max_tokens_per_doc');
      }
    }
  });

  it('bills Cohere’s search units: 150 documents are 2 units at the offer’s per-unit price', async () => {
    const many = Array.from({ length: 150 }, (_, i) => `document ${i} about France`);
    const res = await post(gw.baseB, { model: MODEL, query, documents: many, top_n: 5 });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { results: unknown[]; meta: { billed_units: { search_units: number } } };
    expect(body.results).toHaveLength(5);
    expect(body.meta.billed_units.search_units).toBe(2);
    await gw.gateway.services.usage.flush();
    const [record] = await gw.gateway.services.store.usage.list({ requestId: res.headers.get('x-request-id') as string });
    expect(record).toMatchObject({ kind: 'rerank', provider: 'cohere', units: 2, status: 200 });
    expect(record?.cost).toBeCloseTo(2 * 0.0019, 12);
  });

  it('fails over from Cohere to an OpenAI-compatible (Jina-style) rerank and answers in Cohere’s shape', async () => {
    sim.providers.cohere?.setFault({ kind: 'status', status: 503, retryAfter: null });
    const res = await post(gw.baseB, { model: TWO_PROVIDERS, query, documents, top_n: 2, return_documents: true });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-gateway-provider')).toBe('scaleway');
    expect(res.headers.get('x-gateway-routing-hops')).toBe('1');
    const body = (await res.json()) as { results: { index: number; relevance_score: number; document: { text: string } }[]; meta: unknown };
    expect(body.results.map((r) => r.index)[0]).toBe(1);
    expect(body.results[0]?.document).toEqual({ text: documents[1] });
    expect(Object.keys(body.results[0] ?? {}).sort()).toEqual(['document', 'index', 'relevance_score']);
    // The v1 path answers as Cohere's v1 does.
    expect(body.meta).toEqual({ api_version: { version: '1' }, billed_units: { search_units: 1 } });
    expect(sim.providers.scaleway?.stats().last?.path).toBe('/v1/rerank');
  });

  it('max_tokens_per_doc: sent to Cohere; a model whose providers cannot truncate refuses it (400) where it could cut a document', async () => {
    const res = await post(gw.baseA, { model: TWO_PROVIDERS, query, documents, max_tokens_per_doc: 8 });
    expect([res.status, res.headers.get('x-gateway-provider')]).toEqual([200, 'cohere']);
    expect(sim.providers.cohere?.stats().last?.body).toMatchObject({ max_tokens_per_doc: 8 });

    const before = sim.providers.scaleway?.stats().total ?? 0;
    for (const base of [gw.baseA, gw.baseB]) {
      const refused = await post(base, { model: SCALEWAY_ONLY, query, documents, max_tokens_per_doc: 8 });
      const body = (await refused.json()) as { error: { param: string; message: string } };
      expect([refused.status, body.error.param]).toEqual([400, 'max_tokens_per_doc']);
      expect(body.error.message).toContain('do not truncate documents');
    }
    expect(sim.providers.scaleway?.stats().total).toBe(before);

    // No document as long as the cap in bytes: no token count could reach it, so nothing would be cut.
    const short = await post(gw.baseA, { model: SCALEWAY_ONLY, query, documents, max_tokens_per_doc: 4096 });
    expect([short.status, short.headers.get('x-gateway-provider')]).toEqual([200, 'scaleway']);
    expect(sim.providers.scaleway?.stats().last?.body).toEqual({ model: 'bge-multilingual-gemma2', query, documents });
  });

  it('max_tokens_per_doc that could cut a document does not fail over to a provider that would rank it whole', async () => {
    sim.providers.cohere?.setFault({ kind: 'status', status: 503, retryAfter: null });
    const before = sim.providers.scaleway?.stats().total ?? 0;
    const res = await post(gw.baseA, { model: TWO_PROVIDERS, query, documents, max_tokens_per_doc: 8 });
    expect([res.status, ((await res.json()) as { error: { code: string } }).error.code]).toEqual([502, 'provider_down']);
    expect(sim.providers.scaleway?.stats().total).toBe(before);
  });

  it('max_tokens_per_doc that could cut a document: a provider that cannot truncate is left out before the plan is cut, and a pin to one is a 400', async () => {
    // Scaleway first and no failover: the plan must still be Cohere's, not an empty one.
    const preferred = await post(
      gw.baseA,
      { model: TWO_PROVIDERS, query, documents, max_tokens_per_doc: 8 },
      {
        'x-gateway-provider-prefer': 'scaleway',
        'x-gateway-max-hops': '0',
      },
    );
    expect([preferred.status, preferred.headers.get('x-gateway-provider')]).toEqual([200, 'cohere']);

    const before = sim.providers.scaleway?.stats().total ?? 0;
    for (const base of [gw.baseA, gw.baseB]) {
      const pinned = await post(base, { model: TWO_PROVIDERS, query, documents, max_tokens_per_doc: 8 }, { 'x-gateway-provider': 'scaleway' });
      const body = (await pinned.json()) as { error: { param: string; message: string } };
      expect([pinned.status, body.error.param]).toEqual([400, 'max_tokens_per_doc']);
      expect(body.error.message).toContain("'scaleway'");
    }
    expect(sim.providers.scaleway?.stats().total).toBe(before);
  });
});

describe('rerank budget holds', () => {
  // 10 documents of about 12,000 tokens each (3 characters a token): each whole is 25 chunks of 500 tokens, 3 search
  // units in all; cut to Cohere's default 4,096 tokens, 9 chunks each, 1 unit.
  const long = Array.from({ length: 10 }, (_, i) => `${i} ${'Paris is the capital of France. '.repeat(1125)}`);

  it('hold what Cohere can bill, its documents cut to max_tokens_per_doc (4,096 tokens unless sent): a budget of less than the whole documents’ units pays the request', async () => {
    // Room for 1 search unit at 0.0019 EUR, not the 3 the whole documents would be.
    const budgeted = (await gw.createKey({ budget: 0.003, rateLimitRpm: 10_000 })).key;
    const co = new CohereClientV2({ token: budgeted, environment: gw.url, maxRetries: 0 });
    const { data, rawResponse } = await co.rerank({ model: MODEL, query, documents: long, topN: 2 }).withRawResponse();
    expect([rawResponse.headers.get('x-gateway-provider'), data.meta?.billedUnits?.searchUnits]).toEqual(['cohere', 1]);

    // A cap past the documents' length lets Cohere read (and bill) them whole: held as such, more than this budget.
    const whole = (await gw.createKey({ budget: 0.003, rateLimitRpm: 10_000 })).key;
    const uncapped = new CohereClientV2({ token: whole, environment: gw.url, maxRetries: 0 });
    const refused = (await uncapped.rerank({ model: MODEL, query, documents: long, maxTokensPerDoc: 20_000 }).catch((e: unknown) => e)) as CohereError;
    expect(refused.statusCode).toBe(402);
  });

  it('hold what an OpenAI-compatible rerank is billed, one unit per 100 documents, however long they are', async () => {
    const budgeted = (await gw.createKey({ budget: 0.0015, rateLimitRpm: 10_000 })).key;
    const co = new CohereClient({ token: budgeted, environment: gw.url, maxRetries: 0 });
    const { data, rawResponse } = await co.rerank({ model: SCALEWAY_ONLY, query, documents: long, topN: 2 }).withRawResponse();
    expect([rawResponse.headers.get('x-gateway-provider'), data.meta?.billedUnits?.searchUnits]).toEqual(['scaleway', 1]);
  });
});
