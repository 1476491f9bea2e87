import { createServer, type Server } from 'node:http';
import type { ModelConfig } from '@gw/schema';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';

/**
 * An Azure resource (v1 API: the deployment is the body's `model`) that misbehaves on the wire: a 429 whose only
 * wait is an absurd `x-ratelimit-reset-tokens` or an absurd "retry after N seconds", an error that is not Azure's
 * envelope (API Management's or a proxy's), and a 200 whose `choices` hold no object.
 */
function fakeAzure(): Server {
  return createServer((req, res) => {
    let text = '';
    req.on('data', (d) => {
      text += d;
    });
    req.on('end', () => {
      const json = (status: number, body: unknown, headers: Record<string, string> = {}) => {
        res.writeHead(status, { 'content-type': 'application/json', ...headers });
        res.end(JSON.stringify(body));
      };
      if (req.method === 'GET') return json(200, { data: [] });
      const deployment = (JSON.parse(text) as { model: string }).model;
      const limited = { error: { code: '429', message: 'Requests have exceeded the token rate limit of your pricing tier.' } };
      if (deployment === 'reset-hours') return json(429, limited, { 'x-ratelimit-reset-tokens': '99999h' });
      if (deployment === 'reset-endless') return json(429, limited, { 'x-ratelimit-reset-tokens': `${'9'.repeat(400)}h` });
      if (deployment === 'retry-years') return json(429, { error: { code: '429', message: 'Please retry after 99999999 seconds.' } });
      if (deployment === 'apim') return json(400, { error: 'The api-version 2099-01-01 is not supported by this resource.' });
      if (deployment === 'null-choice') return json(200, { id: 'c1', object: 'chat.completion', created: 1, model: 'gpt-4o-mini', choices: [null] });
      json(200, {
        id: 'c2',
        object: 'chat.completion',
        created: 1,
        model: 'gpt-4o-mini',
        choices: [{ index: 0, message: { role: 'assistant', content: 'Hi' }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 },
      });
    });
  });
}

const WAITS = ['reset-hours', 'reset-endless', 'retry-years'];
const PRICE = { prompt_per_1m: 1, completion_per_1m: 1, currency: 'EUR' };
const CHEAP = { prompt_per_1m: 0.5, completion_per_1m: 0.5, currency: 'EUR' };

function model(id: string, offers: ModelConfig['offers']): ModelConfig {
  return { id: `az/${id}`, kind: 'chat', owned_by: 'openai', context_window: 8000, capabilities: ['streaming'], offers };
}

let host: Server;
let gw: TestGateway;
let key: string;

beforeAll(async () => {
  host = fakeAzure();
  await new Promise<void>((r) => host.listen(0, '127.0.0.1', r));
  const baseUrl = `http://127.0.0.1:${(host.address() as { port: number }).port}`;
  gw = await startGateway({
    catalogue: () => ({
      providers: [
        { id: 'az', type: 'azure', baseUrl, region: 'swedencentral', apiKey: 'azure-key' },
        { id: 'az-b', type: 'azure', baseUrl, region: 'swedencentral', apiKey: 'azure-key' },
      ],
      models: [
        ...['reset-hours', 'reset-endless', 'retry-years', 'apim', 'null-choice'].map((d) => model(d, [{ provider: 'az', upstreamModel: d, pricing: PRICE }])),
        // The same waits through the other resource: an offer that named its wait sits it out, so variant B asks these.
        ...WAITS.map((d) => model(`${d}-b`, [{ provider: 'az-b', upstreamModel: d, pricing: PRICE }])),
        // The cheaper offer is tried first; the other answers.
        model('null-choice-failover', [
          { provider: 'az', upstreamModel: 'null-choice', pricing: CHEAP },
          { provider: 'az-b', upstreamModel: 'ok', pricing: PRICE },
        ]),
      ],
    }),
  });
  key = (await gw.createKey()).key;
});
afterAll(async () => {
  await gw?.close();
  await gw?.sim.close();
  host?.close();
});

interface Answer {
  error: { code: string; message: string };
  choices: { message: { content: string } }[];
}

async function chat(base: string, model: string) {
  const res = await fetch(`${base}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] }),
  });
  return { status: res.status, retryAfter: res.headers.get('retry-after'), body: (await res.json()) as Answer };
}

describe('an Azure 429 whose wait is read from its reset headers or its message', () => {
  it('passes the wait on bounded at an hour, as Retry-After is, however absurd the value (in both variants)', async () => {
    for (const [base, suffix, code] of [
      [gw.baseA, '', 'provider_down'],
      [gw.baseB, '-b', 'upstream_unavailable'],
    ]) {
      for (const deployment of WAITS) {
        const res = await chat(base, `az/${deployment}${suffix}`);
        expect([res.status, res.retryAfter, res.body.error.code]).toEqual([502, '3600', code]);
      }
    }
  });
});

describe('an Azure error that is not in Azure’s envelope', () => {
  it('reaches the client with the text it carries, not "no message"', async () => {
    const res = await chat(gw.baseA, 'az/apim');
    expect(res.status).toBe(400);
    expect(res.body.error.message).toContain('The api-version 2099-01-01 is not supported by this resource.');
  });
});

describe('a 200 whose choices hold no object', () => {
  it('is the provider failing (502 in the variant’s envelope), not a gateway fault (500)', async () => {
    const a = await chat(gw.baseA, 'az/null-choice');
    expect([a.status, a.body.error.code]).toEqual([502, 'provider_down']);
    expect(a.body.error.message).toContain('without choices');
    const b = await chat(gw.baseB, 'az/null-choice');
    expect([b.status, b.body.error.code]).toEqual([502, 'upstream_unavailable']);
  });

  it('moves on to the next offer, which answers', async () => {
    const res = await chat(gw.baseA, 'az/null-choice-failover');
    expect(res.status).toBe(200);
    expect(res.body.choices[0].message.content).toBe('Hi');
  });
});
