import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { ModelConfig } from '@gw/schema';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';
import { answerModelList, startRawUpstream } from './helpers/raw-upstream.js';

/**
 * What makes two requests with one X-Idempotency-Key the same: the request the provider receives. An integer past
 * 2^53 reaches it as written (9007199254740993), though JSON reads it as the double it shares with 9007199254740992.
 * The upstream keeps the exact bytes of each body it is sent.
 */
const sent: string[] = [];

function serve(req: IncomingMessage, res: ServerResponse, body: string) {
  if (req.method === 'GET') return answerModelList(res, ['m']);
  sent.push(body);
  const usage = { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 };
  if ((JSON.parse(body) as { stream?: boolean }).stream === true) {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const chunk = (choices: unknown[], extra = {}) =>
      `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'm', choices, ...extra })}\n\n`;
    res.end(`${chunk([{ index: 0, delta: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }])}${chunk([], { usage })}data: [DONE]\n\n`);
    return;
  }
  res.writeHead(200, { 'content-type': 'application/json' });
  const choices = [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }];
  res.end(JSON.stringify({ id: 'c1', object: 'chat.completion', created: 1, model: 'm', choices, usage }));
}

const model: ModelConfig = {
  id: 'test/vllm',
  kind: 'chat',
  owned_by: 'test',
  context_window: 8000,
  capabilities: ['streaming', 'tools'],
  offers: ['vhost', 'whost'].map((provider) => ({ provider, upstreamModel: 'm', pricing: { prompt_per_1m: 1, completion_per_1m: 2, currency: 'EUR' } })),
};

let upstream: Server;
let gw: TestGateway;
let key: string;
let n = 0;

beforeAll(async () => {
  const started = await startRawUpstream(serve);
  upstream = started.server;
  gw = await startGateway({
    catalogue: () => ({
      providers: [
        { id: 'vhost', type: 'openai', baseUrl: started.baseUrl, region: 'fr-par', apiKey: '' },
        { id: 'whost', type: 'openai', baseUrl: started.baseUrl, region: 'fr-par', apiKey: '' },
      ],
      models: [model],
    }),
  });
  key = (await gw.createKey({ rateLimitRpm: 10_000 })).key;
});
afterAll(async () => {
  await gw?.close();
  upstream?.close();
});

async function post(base: string, idempotencyKey: string, text: string, headers: Record<string, string> = {}) {
  const res = await fetch(`${base}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-idempotency-key': idempotencyKey, ...headers },
    body: text,
  });
  const body = await res.text();
  return {
    status: res.status,
    replayed: res.headers.get('idempotent-replayed'),
    provider: res.headers.get('x-gateway-provider'),
    error: res.status === 200 ? undefined : JSON.parse(body).error,
  };
}

const chat = (extra: string) => `{"model":"test/vllm","messages":[{"role":"user","content":"hi"}],"max_tokens":5${extra}}`;
const tool = (maximum: string) =>
  `,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"n":{"type":"integer","maximum":${maximum}}}}}}]`;

describe('X-Idempotency-Key fingerprint of integers past 2^53', () => {
  for (const [variant, base, type] of [
    ['A', () => gw.baseA, 'unprocessable_entity'],
    ['B', () => gw.baseB, 'invalid_request_error'],
  ] as const) {
    for (const [what, first, other] of [
      ['a seed', ',"seed":9007199254740993', ',"seed":9007199254740992'],
      ['a streamed seed', ',"stream":true,"seed":-9007199254740993', ',"stream":true,"seed":-9007199254740992'],
      ["a tool schema's maximum", tool('9007199254740993'), tool('9007199254740992')],
      ["a provider's own field", ',"x_ids":[1,18446744073709551615]', ',"x_ids":[1,18446744073709551616]'],
    ] as const) {
      it(`${variant}: ${what} the provider receives otherwise is another request (422), the same one written otherwise is replayed`, async () => {
        const k = `fp-${variant}-${++n}`;
        const before = sent.length;
        expect((await post(base(), k, chat(first))).status).toBe(200);
        expect(sent.length).toBe(before + 1);
        // The same request, its fields in another order: replayed.
        const reordered = `{"max_tokens":5${first},"messages":[{"role":"user","content":"hi"}],"model":"test/vllm"}`;
        expect(await post(base(), k, reordered)).toMatchObject({ status: 200, replayed: 'true' });
        // One the provider would receive with another integer: refused, never answered with the first one's answer.
        const refused = await post(base(), k, chat(other));
        expect([refused.status, refused.replayed, refused.error?.type, refused.error?.param]).toEqual([422, null, type, 'X-Idempotency-Key']);
        expect(sent.length).toBe(before + 1);
      });
    }
  }

  it('an integer below 2^53 written as 5 or 5.0 is one request, as JSON reads it and the provider receives it', async () => {
    const k = `fp-safe-${++n}`;
    expect((await post(gw.baseA, k, chat(',"seed":4503599627370497'))).status).toBe(200);
    expect(await post(gw.baseA, k, chat(',"seed":4503599627370497.0'))).toMatchObject({ status: 200, replayed: 'true' });
  });
});

describe('X-Idempotency-Key fingerprint of the routing asked for', () => {
  const body = chat('');
  for (const [variant, base, type] of [
    ['A', () => gw.baseA, 'unprocessable_entity'],
    ['B', () => gw.baseB, 'invalid_request_error'],
  ] as const) {
    it(`${variant}: a repeat pinned to another provider, or to none, is another request (422), never the pinned provider's answer`, async () => {
      const k = `fp-pin-${variant}-${++n}`;
      const before = sent.length;
      expect(await post(base(), k, body, { 'x-gateway-provider': 'vhost' })).toMatchObject({ status: 200, provider: 'vhost', replayed: null });
      // The same pin, however spaced: the stored answer.
      expect(await post(base(), k, body, { 'X-Gateway-Provider': ' vhost ' })).toMatchObject({ status: 200, provider: 'vhost', replayed: 'true' });
      for (const other of [{ 'x-gateway-provider': 'whost' }, {}, { 'x-gateway-provider-prefer': 'whost' }]) {
        const refused = await post(base(), k, body, other);
        expect([refused.status, refused.error?.type, refused.error?.param], JSON.stringify(other)).toEqual([422, type, 'X-Idempotency-Key']);
      }
      expect(sent.length).toBe(before + 1);
    });
  }

  it('a strategy or failover bound asked for is part of the request; its default, sent or not, is the same request', async () => {
    const k = `fp-route-${++n}`;
    expect((await post(gw.baseB, k, body)).status).toBe(200);
    expect(await post(gw.baseB, k, body, { 'x-gateway-strategy': 'default', 'x-gateway-max-hops': '2' })).toMatchObject({ status: 200, replayed: 'true' });
    for (const other of [{ 'x-gateway-strategy': 'cheapest' }, { 'x-gateway-max-hops': '0' }]) {
      expect((await post(gw.baseB, k, body, other)).status, JSON.stringify(other)).toBe(422);
    }
  });
});
