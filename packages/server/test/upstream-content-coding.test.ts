import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { brotliCompressSync, deflateRawSync, gzipSync } from 'node:zlib';
import type { ModelConfig } from '@gw/schema';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';
import { answerModelList, startRawUpstream } from './helpers/raw-upstream.js';

/**
 * An OpenAI-compatible host (or a proxy in front of one) that compresses its whole answers though the gateway asks
 * for `Accept-Encoding: identity`: gzip, br and raw deflate; a refusal and an HTML error page gzipped; and a success
 * in a coding the gateway does not know.
 */
const USAGE = { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 };
const PRICE = { prompt_per_1m: 1000, completion_per_1m: 2000, currency: 'EUR' };

function completion(model: string): string {
  const message = { role: 'assistant', content: `answer of ${model}` };
  return JSON.stringify({ id: 'c1', object: 'chat.completion', created: 1, model, choices: [{ index: 0, message, finish_reason: 'stop' }], usage: USAGE });
}

/** 300 gzip members of 1 MiB of zeros each: some 300 KB that decode to more than the 256 MiB an answer may be. */
function bomb(): Buffer {
  const member = gzipSync(Buffer.alloc(1024 * 1024));
  return Buffer.concat(Array.from({ length: 300 }, () => member));
}

function compressingHost(req: IncomingMessage, res: ServerResponse, body: string) {
  if (req.method === 'GET') return answerModelList(res, ['gzip', 'br', 'deflate', 'compress', 'refusal', 'page', 'bomb', 'ok']);
  const { model } = JSON.parse(body) as { model: string };
  const json = { 'content-type': 'application/json' };
  if (model === 'gzip') res.writeHead(200, { ...json, 'content-encoding': 'gzip' }).end(gzipSync(completion(model)));
  else if (model === 'br') res.writeHead(200, { ...json, 'content-encoding': 'br' }).end(brotliCompressSync(completion(model)));
  else if (model === 'deflate') res.writeHead(200, { ...json, 'content-encoding': 'deflate' }).end(deflateRawSync(completion(model)));
  else if (model === 'bomb') res.writeHead(200, { ...json, 'content-encoding': 'gzip' }).end(bomb());
  else if (model === 'compress') res.writeHead(200, { ...json, 'content-encoding': 'compress' }).end(gzipSync(completion(model)));
  else if (model === 'refusal') {
    const error = { error: { message: "This model's maximum context length is 8192 tokens", type: 'invalid_request_error', param: 'messages' } };
    res.writeHead(400, { ...json, 'content-encoding': 'gzip' }).end(gzipSync(JSON.stringify(error)));
  } else if (model === 'page') {
    res
      .writeHead(503, { 'content-type': 'text/html', 'content-encoding': 'gzip' })
      .end(gzipSync('<html><head><title>503 Service Unavailable</title></head></html>'));
  } else res.writeHead(200, json).end(completion(model));
}

function model(id: string, upstream: string[]): ModelConfig {
  return {
    id: `coded/${id}`,
    kind: 'chat',
    owned_by: 'test',
    context_window: 8000,
    offers: upstream.map((upstreamModel, at) => ({ provider: at === 0 ? 'host' : 'spare', upstreamModel, pricing: PRICE })),
  };
}

let host: Server;
let gw: TestGateway;

beforeAll(async () => {
  const started = await startRawUpstream(compressingHost);
  host = started.server;
  gw = await startGateway({
    catalogue: () => ({
      providers: [
        { id: 'host', type: 'openai', baseUrl: started.baseUrl, region: 'fr-par', apiKey: '' },
        { id: 'spare', type: 'openai', baseUrl: started.baseUrl, region: 'fr-par', apiKey: '' },
      ],
      models: [
        model('gzip', ['gzip']),
        model('br', ['br']),
        model('deflate', ['deflate']),
        model('compress', ['compress']),
        model('refusal', ['refusal', 'ok']),
        model('page', ['page']),
        model('bomb', ['bomb']),
      ],
    }),
  });
});
afterAll(async () => {
  await gw?.close();
  await gw?.sim.close();
  host?.close();
});

async function post(key: string, model: string, base = gw.baseA): Promise<{ status: number; body: { error?: { message: string; param: string | null } } }> {
  const res = await fetch(`${base}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] }),
  });
  return { status: res.status, body: (await res.json()) as { error?: { message: string; param: string | null } } };
}

describe('a whole answer the provider compressed though identity was asked', () => {
  it('is decoded (gzip, br, raw deflate): the OpenAI SDK gets the answer, billed at the provider’s count', async () => {
    const { id, key } = await gw.createKey();
    const client = new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 0 });
    for (const coding of ['gzip', 'br', 'deflate']) {
      const answer = await client.chat.completions.create({ model: `coded/${coding}`, messages: [{ role: 'user', content: 'hi' }] });
      expect(answer.choices[0]?.message.content).toBe(`answer of ${coding}`);
      expect(answer.usage).toMatchObject({ prompt_tokens: 11, completion_tokens: 7 });
    }
    await eventually(async () => {
      expect((await gw.admin<{ spent: number }>('GET', `/keys/${id}`)).body.spent).toBeCloseTo(3 * 0.025, 9);
    });
  });

  it('tells a refusal in the provider’s words, not as binary, with no failover (in both variants)', async () => {
    const { key } = await gw.createKey();
    const a = await post(key, 'coded/refusal');
    expect(a.status).toBe(400);
    expect(a.body.error?.message).toContain("This model's maximum context length is 8192 tokens");
    expect(a.body.error?.param).toBe('messages');
    const b = await post(key, 'coded/refusal', gw.baseB);
    expect(b.status).toBe(400);
    expect(b.body.error?.message).toContain("This model's maximum context length is 8192 tokens");
  });

  it('tells an error page by its title, and a coding it does not know by name', async () => {
    const { key } = await gw.createKey();
    const page = await post(key, 'coded/page');
    expect(page.status).toBe(502);
    expect(page.body.error?.message).toContain('an HTML page titled "503 Service Unavailable"');
    const unknown = await post(key, 'coded/compress');
    expect(unknown.status).toBe(502);
    expect(unknown.body.error?.message).toContain('host sent a compress-encoded answer that could not be decoded');
  });

  it('is decoded off the event loop: one that decodes to over 256 MiB is refused, other requests served meanwhile', async () => {
    const { key } = await gw.createKey();
    const delay = monitorEventLoopDelay({ resolution: 10 });
    delay.enable();
    const refused = await post(key, 'coded/bomb');
    delay.disable();
    expect(refused.status).toBe(502);
    expect(refused.body.error?.message).toContain('host sent an answer larger than 256 MiB');
    // Decoded on the event loop, the 256 MiB held every other request and stream some 400 ms (more on a busy machine).
    expect(delay.max / 1e6).toBeLessThan(200);
  });
});
