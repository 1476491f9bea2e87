import { createServer, type Server } from 'node:http';
import type { ModelConfig } from '@gw/schema';
import { CohereClient, type CohereError } from 'cohere-ai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';

/**
 * Rerank hosts (Cohere's /v2/rerank and a Jina-style /v1/rerank on one fake) whose results name documents wrongly:
 * a fractional index, the same document twice. The upstream model name picks the fault; `ok` answers right.
 */
const FAULTS: Record<string, (n: number) => { index: number; relevance_score: number }[]> = {
  ok: (n) => Array.from({ length: n }, (_, i) => ({ index: n - 1 - i, relevance_score: 1 - i / n })),
  fractional: (n) => Array.from({ length: n }, (_, i) => ({ index: i + 0.5, relevance_score: 1 - i / n })),
  repeated: (n) => Array.from({ length: n }, (_, i) => ({ index: 0, relevance_score: 1 - i / n })),
};

function fakeRerankHost(): Server {
  return createServer((req, res) => {
    let text = '';
    req.on('data', (d) => {
      text += d;
    });
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json' });
      const names = Object.keys(FAULTS);
      if (req.method === 'GET') {
        res.end(
          JSON.stringify(
            req.url?.startsWith('/v1/models?') ? { models: names.map((name) => ({ name, endpoints: ['rerank'] })) } : { data: names.map((id) => ({ id })) },
          ),
        );
        return;
      }
      const body = JSON.parse(text) as { model: string; documents: string[] };
      const results = (FAULTS[body.model] as (n: number) => unknown[])(body.documents.length);
      const meta = { api_version: { version: '2' }, billed_units: { search_units: 1 } };
      res.end(JSON.stringify({ id: 'r-1', results, ...(req.url === '/v2/rerank' ? { meta } : { usage: { total_tokens: 9 } }) }));
    });
  });
}

const PRICE = { prompt_per_1m: 0, completion_per_1m: 0, currency: 'EUR', per_unit: 0.5 };

function model(id: string, offers: [provider: string, upstreamModel: string][]): ModelConfig {
  return { id: `t/${id}`, kind: 'rerank', owned_by: 't', offers: offers.map(([provider, upstreamModel]) => ({ provider, upstreamModel, pricing: PRICE })) };
}

let host: Server;
let gw: TestGateway;

beforeAll(async () => {
  host = fakeRerankHost();
  await new Promise<void>((r) => host.listen(0, '127.0.0.1', r));
  const baseUrl = `http://127.0.0.1:${(host.address() as { port: number }).port}`;
  gw = await startGateway({
    catalogue: () => ({
      providers: [
        { id: 'co', type: 'cohere', baseUrl, region: 'eu' },
        { id: 'jina', type: 'openai', baseUrl: `${baseUrl}/v1`, region: 'eu' },
      ],
      models: [
        ...['fractional', 'repeated'].flatMap((fault) => [
          model(`co-${fault}`, [['co', fault]]),
          model(`jina-${fault}`, [['jina', fault]]),
          model(`co-${fault}-then-ok`, [
            ['co', fault],
            ['jina', 'ok'],
          ]),
          model(`jina-${fault}-then-ok`, [
            ['jina', fault],
            ['co', 'ok'],
          ]),
        ]),
      ],
    }),
  });
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await gw?.sim.close();
  host?.close();
});

const documents = ['alpha', 'beta', 'gamma'];

describe('a rerank answer whose results name no document, or one twice', () => {
  it.each(['fractional', 'repeated'])('%s index: a 502 naming it, nothing billed, in both variants', async (fault) => {
    const created = await gw.createKey({ rateLimitRpm: 1000 });
    for (const [variant, env] of [
      ['A', gw.url],
      ['B', `${gw.url}/alt`],
    ] as const) {
      const co = new CohereClient({ token: created.key, environment: env, maxRetries: 0 });
      for (const provider of ['co', 'jina']) {
        const err = (await co
          .rerank({ model: `t/${provider}-${fault}`, query: 'q', documents, returnDocuments: true })
          .catch((e: unknown) => e)) as CohereError;
        expect([variant, provider, err.statusCode]).toEqual([variant, provider, 502]);
        expect(JSON.stringify(err.body)).toMatch(`${provider} sent a rerank result whose index ${fault === 'fractional' ? '0.5' : '0'} is no document's`);
      }
    }
    await gw.gateway.services.usage.flush();
    expect((await gw.admin<{ spent: number }>('GET', `/keys/${created.id}`)).body.spent).toBe(0);
  });

  it.each(['fractional', 'repeated'])('%s index: fails over to the provider that ranks each document once, billed once, for it', async (fault) => {
    const created = await gw.createKey({ rateLimitRpm: 1000 });
    const co = new CohereClient({ token: created.key, environment: gw.url, maxRetries: 0 });
    for (const first of ['co', 'jina']) {
      const { data, rawResponse } = await co.rerank({ model: `t/${first}-${fault}-then-ok`, query: 'q', documents, returnDocuments: true }).withRawResponse();
      expect(rawResponse.headers.get('x-gateway-provider')).toBe(first === 'co' ? 'jina' : 'co');
      expect(data.results.map((r) => [r.index, r.document?.text])).toEqual([
        [2, 'gamma'],
        [1, 'beta'],
        [0, 'alpha'],
      ]);
    }
    await gw.gateway.services.usage.flush();
    // Two requests, each one search unit at 0.5 on the provider that answered; the failed attempts cost nothing.
    expect((await gw.admin<{ spent: number }>('GET', `/keys/${created.id}`)).body.spent).toBeCloseTo(1, 9);
    const records = await gw.gateway.services.store.usage.list({ keyId: created.id });
    expect(records.map((r) => [r.provider, r.status, r.units]).sort()).toEqual([
      ['co', 200, 1],
      ['jina', 200, 1],
    ]);
  });
});
