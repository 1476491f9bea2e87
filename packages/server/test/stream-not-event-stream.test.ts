import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { gzipSync } from 'node:zlib';
import type { ModelConfig } from '@gw/schema';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';
import { answerModelList, startRawUpstream } from './helpers/raw-upstream.js';

/**
 * A host that answers a stream request 200 with something other than an event stream: a proxy's HTML page, a
 * whole completion or an error object as JSON, or a gzip-encoded body nobody asked for. Each is refused at once
 * with a message naming what came, and the request goes on to the next offer. A real stream typed
 * `text/event-stream; charset=utf-8`, or with no Content-Type at all, is still read.
 */
const HTML = '<!DOCTYPE html><html><head><title>Sign in</title></head><body>Please sign in</body></html>';

function sse(text: string, model: string): string {
  const chunk = (delta: Record<string, unknown>, finish: string | null) =>
    `data: ${JSON.stringify({ id: 's', object: 'chat.completion.chunk', created: 1, model, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
  const usage = `data: ${JSON.stringify({ id: 's', object: 'chat.completion.chunk', created: 1, model, choices: [], usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 } })}\n\n`;
  return `${chunk({ role: 'assistant', content: text }, null)}${chunk({}, 'stop')}${usage}data: [DONE]\n\n`;
}

function answer(req: IncomingMessage, res: ServerResponse, body: string) {
  if (req.method === 'GET') return answerModelList(res, NAMES);
  const model = (JSON.parse(body) as { model: string }).model;
  if (req.url?.startsWith('/fine/')) {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    return res.end(sse('from fine', model));
  }
  if (model === 'html') {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    return res.end(HTML);
  }
  if (model === 'json-completion') {
    res.writeHead(200, { 'content-type': 'application/json' });
    const completion = {
      id: 'c',
      object: 'chat.completion',
      created: 1,
      model,
      choices: [{ index: 0, message: { role: 'assistant', content: 'whole' }, finish_reason: 'stop' }],
    };
    return res.end(JSON.stringify(completion));
  }
  if (model === 'json-error') {
    res.writeHead(200, { 'content-type': 'application/json' });
    return res.end(JSON.stringify({ error: { message: 'The model is overloaded, try again later', type: 'server_error' } }));
  }
  if (model === 'gzip') {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'content-encoding': 'gzip' });
    return res.end(gzipSync(sse('compressed', model)));
  }
  if (model === 'charset') {
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' });
    return res.end(sse('with charset', model));
  }
  // 'untyped': a real stream without a Content-Type.
  res.removeHeader('content-type');
  res.writeHead(200);
  res.end(sse('untyped', model));
}

const PRICE = { prompt_per_1m: 1000, completion_per_1m: 2000, currency: 'EUR' };

function model(id: string, fallback: boolean): ModelConfig {
  return {
    id: `odd/${id}${fallback ? '-fallback' : ''}`,
    kind: 'chat',
    owned_by: 'test',
    context_window: 8000,
    capabilities: ['streaming'],
    offers: [{ provider: 'odd', upstreamModel: id, pricing: PRICE }, ...(fallback ? [{ provider: 'fine', upstreamModel: id, pricing: PRICE }] : [])],
  };
}

const REFUSED = {
  html: 'odd answered a stream request with Content-Type text/html, not an event stream',
  'json-completion': 'odd answered a stream request with Content-Type application/json, not an event stream: a whole chat completion',
  'json-error': 'odd answered a stream request with Content-Type application/json, not an event stream: The model is overloaded, try again later',
  gzip: 'odd answered a stream request with a gzip-encoded body, which the gateway did not ask for (it asks for identity)',
} as const;

const NAMES = [...Object.keys(REFUSED), 'charset', 'untyped'];

let upstream: Server;
let gw: TestGateway;

beforeAll(async () => {
  const started = await startRawUpstream(answer);
  upstream = started.server;
  const origin = new URL(started.baseUrl).origin;
  gw = await startGateway({
    env: { GW_CIRCUIT_FAILURES: '1000' },
    catalogue: () => ({
      providers: [
        { id: 'odd', type: 'openai', baseUrl: `${origin}/v1`, region: 'fr-par', apiKey: '' },
        { id: 'fine', type: 'openai', baseUrl: `${origin}/fine/v1`, region: 'fr-par', apiKey: '' },
        { id: 'odd-mistral', type: 'mistral', baseUrl: `${origin}/v1`, region: 'fr-par', apiKey: 'k' },
        { id: 'odd-azure', type: 'azure', baseUrl: origin, region: 'swedencentral', apiKey: 'k' },
      ],
      models: [
        ...NAMES.flatMap((n) => [model(n, false), model(n, true)]),
        ...(['odd-mistral', 'odd-azure'] as const).map((provider) => ({
          ...model('html', true),
          id: `${provider}/html`,
          offers: [
            { provider, upstreamModel: 'html', pricing: PRICE },
            { provider: 'fine', upstreamModel: 'html', pricing: PRICE },
          ],
        })),
      ],
    }),
  });
});
afterAll(async () => {
  await gw?.close();
  await gw?.sim.close();
  upstream?.close();
});

async function streamed(base: string, key: string, model: string) {
  const res = await fetch(`${base}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model, stream: true, messages: [{ role: 'user', content: 'hi' }] }),
  });
  return { res, text: await res.text() };
}

function content(text: string): string {
  let out = '';
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
    const chunk = JSON.parse(line.slice(6)) as { choices: { delta?: { content?: string } }[] };
    out += chunk.choices[0]?.delta?.content ?? '';
  }
  return out;
}

describe.each([
  ['A', 'baseA', 'provider_down'],
  ['B', 'baseB', 'upstream_unavailable'],
] as const)('variant %s: a 200 to a stream request that is no event stream', (_v, base, code) => {
  for (const [mode, message] of Object.entries(REFUSED)) {
    it(`${mode}: the client is told what came, with the code of every offer failing, and nothing is billed`, async () => {
      const { id, key } = await gw.createKey();
      const { res, text } = await streamed(gw[base], key, `odd/${mode}`);
      expect(res.status).toBe(502);
      const body = JSON.parse(text) as { error: { message: string; code: string } };
      expect(body.error.code).toBe(code);
      expect(body.error.message).toContain(`last error: ${message}`);
      expect(body.error.message).not.toContain('[DONE]');
      expect((await gw.admin<{ spent: number }>('GET', `/keys/${id}`)).body.spent).toBe(0);
    });

    it(`${mode}: fails over to the next offer, which answers the stream`, async () => {
      const { key } = await gw.createKey();
      const { res, text } = await streamed(gw[base], key, `odd/${mode}-fallback`);
      expect(res.status).toBe(200);
      expect(res.headers.get('x-gateway-provider')).toBe('fine');
      expect(content(text)).toBe('from fine');
      expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    });
  }

  for (const [mode, said] of [
    ['charset', 'with charset'],
    ['untyped', 'untyped'],
  ] as const) {
    it(`${mode}: a real stream is read from the first offer`, async () => {
      const { key } = await gw.createKey();
      const { res, text } = await streamed(gw[base], key, `odd/${mode}-fallback`);
      expect(res.status).toBe(200);
      expect(res.headers.get('x-gateway-provider')).toBe('odd');
      expect(content(text)).toBe(said);
    });
  }
});

describe.each(['odd-mistral', 'odd-azure'])('the %s adapter', (provider) => {
  it('names an HTML answer too, and fails over to the next offer', async () => {
    const { key } = await gw.createKey();
    const { res, text } = await streamed(gw.baseA, key, `${provider}/html`);
    expect(res.status).toBe(200);
    expect(res.headers.get('x-gateway-provider')).toBe('fine');
    expect(content(text)).toBe('from fine');
    const pinned = await fetch(`${gw.baseA}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-gateway-provider': provider },
      body: JSON.stringify({ model: `${provider}/html`, stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(pinned.status).toBe(502);
    expect(((await pinned.json()) as { error: { message: string } }).error.message).toContain(
      `last error: ${provider} answered a stream request with Content-Type text/html, not an event stream`,
    );
  });
});

describe("OpenAI's SDK", () => {
  it('throws the message naming what came', async () => {
    const { key } = await gw.createKey();
    const client = new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 0 });
    const call = client.chat.completions.create({ model: 'odd/html', stream: true, messages: [{ role: 'user', content: 'hi' }] });
    await expect(call).rejects.toThrow(REFUSED.html);
  });
});
