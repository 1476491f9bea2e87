import { createServer } from 'node:http';
import { type Simulator, startSimulator } from '@gw/simulator';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { toCohereEmbedBody } from '../src/providers/cohere/embeddings.js';
import { cohereError } from '../src/providers/cohere/errors.js';
import { CohereAdapter } from '../src/providers/cohere/index.js';
import { parseCohereModelsPage } from '../src/providers/cohere/models.js';
import { parseCohereRerank, toCohereRerankBody } from '../src/providers/cohere/rerank.js';
import { answer, call, providerConfig, upstreamError } from './helpers/adapters.js';

describe('Cohere adapter fixtures', () => {
  it('maps rerank requests to v2 (strings, top_n, max_tokens_per_doc) and answers with results and search units', () => {
    expect(toCohereRerankBody({ query: 'q', documents: ['a', 'b'], topN: 1, maxTokensPerDoc: 512 }, 'rerank-v3.5')).toEqual({
      model: 'rerank-v3.5',
      query: 'q',
      documents: ['a', 'b'],
      top_n: 1,
      max_tokens_per_doc: 512,
    });
    const parsed = parseCohereRerank(
      'cohere',
      answer(200, {
        id: 'r1',
        results: [
          { index: 1, relevance_score: 0.9 },
          { index: 0, relevance_score: 0.1 },
        ],
        meta: { api_version: { version: '2' }, billed_units: { search_units: 3 } },
      }),
      2,
    );
    expect(parsed).toEqual({
      id: 'r1',
      results: [
        { index: 1, relevanceScore: 0.9 },
        { index: 0, relevanceScore: 0.1 },
      ],
      searchUnits: 3,
      inputTokens: null,
    });
    // Its token count where it gives one: billed_units first, else what it read (meta.tokens).
    const counted = (meta: Record<string, unknown>) =>
      parseCohereRerank('cohere', answer(200, { id: 'r', results: [{ index: 0, relevance_score: 0.5 }], meta }), 1).inputTokens;
    expect(counted({ billed_units: { search_units: 1, input_tokens: 120 }, tokens: { input_tokens: 150 } })).toBe(120);
    expect(counted({ billed_units: { search_units: 1 }, tokens: { input_tokens: 150 } })).toBe(150);
    expect(() => parseCohereRerank('cohere', answer(200, { results: [{ index: 5, relevance_score: 0.2 }] }), 2)).toThrow(/index/);
  });

  it('maps embeddings to embed v2: texts, input_type (search_document by default), floats, truncate END, output_dimension', () => {
    expect(toCohereEmbedBody({ input: ['a'], dimensions: 512, inputType: 'search_query' }, ['a'], 'embed-v4.0')).toEqual({
      model: 'embed-v4.0',
      input_type: 'search_query',
      texts: ['a'],
      embedding_types: ['float'],
      truncate: 'END',
      output_dimension: 512,
    });
    expect(toCohereEmbedBody({ input: ['a'] }, ['a'], 'embed-v4.0').input_type).toBe('search_document');
  });

  it('maps {id, message} errors; 498 is our key refused (401), 402 and 499 are the provider failing us (502)', () => {
    const bad = cohereError('cohere', answer(400, { id: 'e1', message: 'invalid request: list of documents must not be empty' }));
    expect([bad.status, bad.clientFault]).toEqual([400, true]);
    expect(bad.message).toContain('list of documents must not be empty');
    const refused = cohereError('cohere', answer(498, { id: 'e', message: 'blocked token sk-co-1234' }));
    expect(refused.status).toBe(401);
    // What Cohere says of the gateway's own key is the operator's business, as with any provider's 401.
    expect(refused.message).toBe("cohere answered 498: it refused the gateway's credentials");
    expect(refused.detail).toContain('blocked token');
    expect(cohereError('cohere', answer(402, { id: 'e', message: 'billing limit' })).status).toBe(502);
    expect(cohereError('cohere', answer(499, { id: 'e', message: 'cancelled' })).status).toBe(502);
    const limited = cohereError('cohere', answer(429, { id: 'e', message: 'past the rate limit' }, { 'retry-after': '9' }));
    expect([limited.status, limited.retryAfterS]).toEqual([429, 9]);
    expect(parseCohereModelsPage('cohere', answer(200, { models: [{ name: 'rerank-v3.5' }], next_page_token: '1' }))).toEqual({
      names: ['rerank-v3.5'],
      next: '1',
    });
  });
});

describe('Cohere adapter against the simulated Cohere API', () => {
  let sim: Simulator;
  let adapter: CohereAdapter;
  beforeAll(async () => {
    sim = await startSimulator({ latencyScale: 0, only: ['cohere'] });
    adapter = new CohereAdapter(providerConfig(sim, 'cohere'));
  });
  afterAll(async () => {
    await adapter?.close();
    await sim?.close();
  });
  beforeEach(() => sim.providers.cohere?.reset());

  it('lists every model across pages', async () => {
    const cohere = sim.providers.cohere;
    cohere?.setModels([...(cohere?.models() ?? []), ...Array.from({ length: 1500 }, (_, i) => `embed-extra-${i}`)]);
    const names = await adapter.listModels();
    expect(names).toHaveLength(1504);
    expect(names).toEqual(expect.arrayContaining(['rerank-v3.5', 'embed-multilingual-v3.0', 'embed-v4.0', 'command-a-03-2025', 'embed-extra-1499']));
  });

  it('reranks and embeds; more than 96 texts go in batches, in order', async () => {
    const ranked = await adapter.rerank({ query: 'capital of France', documents: ['Berlin', 'Paris is the capital of France'] }, call('rerank-v3.5'));
    expect(ranked.results.sort((x, y) => y.relevanceScore - x.relevanceScore)[0]?.index).toBe(1);
    expect(ranked.searchUnits).toBe(1);
    const texts = Array.from({ length: 200 }, (_, i) => `text ${i}`);
    const embedded = await adapter.embeddings({ input: texts }, call('embed-multilingual-v3.0'));
    expect(embedded.vectors).toHaveLength(200);
    expect(sim.providers.cohere?.stats().byEndpoint.embeddings).toBe(3);
    const single = await adapter.embeddings({ input: ['text 150'] }, call('embed-multilingual-v3.0'));
    expect(single.vectors[0]).toEqual(embedded.vectors[150]);
    expect(embedded.promptTokens).toBeGreaterThan(0);
  });

  it('serves no chat (the catalogue never routes chat to it) and maps its errors', async () => {
    const chat = await upstreamError(() => adapter.chat({ model: 'x', messages: [] }, call('rerank-v3.5')));
    expect([chat.status, chat.message]).toEqual([400, expect.stringContaining('serves no chat')]);
    const missing = await upstreamError(() => adapter.rerank({ query: 'q', documents: ['a'] }, call('rerank-v9')));
    expect([missing.status, missing.retryable]).toEqual([404, true]);
    const dims = await upstreamError(() => adapter.embeddings({ input: ['a'], dimensions: 256 }, call('embed-multilingual-v3.0')));
    expect([dims.status, dims.clientFault]).toEqual([400, true]);
    const wrongKey = new CohereAdapter(providerConfig(sim, 'cohere', { apiKey: 'nope' }));
    expect((await upstreamError(() => wrongKey.listModels())).status).toBe(401);
    await wrongKey.close();
  });
});

describe('Cohere embeddings in batches of 96', () => {
  it('reports no token count when one batch came without one, so that the route bills its estimate of all the texts, not of some', async () => {
    let calls = 0;
    // A Cohere whose second batch answer lacks meta.billed_units.
    const host = createServer((req, res) => {
      let text = '';
      req.on('data', (d) => {
        text += d;
      });
      req.on('end', () => {
        calls++;
        const texts = (JSON.parse(text) as { texts: string[] }).texts;
        const meta = calls === 2 ? {} : { meta: { billed_units: { input_tokens: texts.length * 3 } } };
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ id: 'e', embeddings: { float: texts.map(() => [0.1, 0.2]) }, texts, ...meta }));
      });
    });
    await new Promise<void>((r) => host.listen(0, '127.0.0.1', r));
    const baseUrl = `http://127.0.0.1:${(host.address() as { port: number }).port}`;
    const adapter = new CohereAdapter({ id: 'cohere', type: 'cohere', baseUrl, apiKey: 'k', region: 'eu' });
    try {
      const input = Array.from({ length: 150 }, (_, i) => `text ${i}`);
      const result = await adapter.embeddings({ input }, call('embed-v4.0'));
      expect([calls, result.vectors.length, result.promptTokens]).toEqual([2, 150, 0]);
    } finally {
      await adapter.close();
      host.close();
    }
  });
});
