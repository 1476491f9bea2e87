import { createServer, type Server } from 'node:http';
import { CohereClient } from 'cohere-ai';
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { wav } from './helpers/audio.js';
import { startGateway, type TestGateway } from './helpers/gateway.js';

/**
 * A host that reports absurd usage whatever it is asked: a billion prompt tokens for a 10-token prompt, a billion
 * embedding, rerank, audio and transcript tokens, a million search units and a million seconds. Each is billed, told
 * and spent from a budget at most what the request itself could cost (docs/decisions.md, reported usage is bounded).
 */
const BILLION = 1_000_000_000;
const MILLION = 1_000_000;

function chunk(model: string, delta: object | null, usage?: object) {
  const choices = delta ? [{ index: 0, delta, finish_reason: 'stop' }] : [];
  return `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model, choices, ...(usage ? { usage } : {}) })}\n\n`;
}

function absurdHost(): Server {
  return createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (d: Buffer) => parts.push(d));
    req.on('end', () => {
      const json = (body: unknown) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(body));
      };
      if (req.method === 'GET') {
        const ids = ['chat', 'embed', 'rank', 'listen', 'listen-tokens'];
        return json(req.url?.startsWith('/v1/models?') ? { models: [{ name: 'rank', endpoints: ['rerank'] }] } : { data: ids.map((id) => ({ id })) });
      }
      if (req.url?.endsWith('/audio/transcriptions')) {
        const tokens = (req.headers['content-type'] ?? '').length > 0 && Buffer.concat(parts).includes('listen-tokens');
        const usage = tokens
          ? { type: 'tokens', input_tokens: BILLION, output_tokens: BILLION, total_tokens: 2 * BILLION }
          : { type: 'duration', seconds: MILLION };
        return json({ task: 'transcribe', language: 'english', duration: MILLION, text: 'Hello there.', segments: [], usage });
      }
      const body = JSON.parse(Buffer.concat(parts).toString('utf8')) as { model: string; stream?: boolean; input?: string[]; documents?: string[] };
      if (req.url === '/v2/rerank') {
        const results = (body.documents ?? []).map((_, index) => ({ index, relevance_score: 1 - index / 10 }));
        return json({ id: 'r1', results, meta: { api_version: { version: '2' }, billed_units: { search_units: MILLION, input_tokens: BILLION } } });
      }
      if (req.url?.endsWith('/rerank')) {
        const results = (body.documents ?? []).map((_, index) => ({ index, relevance_score: 1 - index / 10 }));
        return json({ id: 'r1', results, usage: { total_tokens: BILLION } });
      }
      if (req.url?.endsWith('/embeddings')) {
        const data = (body.input ?? []).map((_, index) => ({ object: 'embedding', index, embedding: [0.1, 0.2] }));
        return json({ object: 'list', data, model: body.model, usage: { prompt_tokens: BILLION, total_tokens: BILLION } });
      }
      // `count N` in the prompt: an honest host's count of N; else a billion.
      const asked = /count (\d+)/.exec(JSON.stringify(body))?.[1];
      const prompt = asked === undefined ? BILLION : Number(asked);
      const usage = { prompt_tokens: prompt, completion_tokens: 5, total_tokens: prompt + 5 };
      if (body.stream) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.end(`${chunk(body.model, { role: 'assistant', content: 'Hi there.' })}${chunk(body.model, null, usage)}data: [DONE]\n\n`);
        return;
      }
      const message = { role: 'assistant', content: 'Hi there.' };
      json({ id: 'c1', object: 'chat.completion', created: 1, model: body.model, choices: [{ index: 0, message, finish_reason: 'stop' }], usage });
    });
  });
}

/** A euro a thousand tokens: a billion tokens would be a million euros. */
const PRICE = { prompt_per_1m: 1000, completion_per_1m: 1000, currency: 'EUR' };
const UNIT_PRICE = { ...PRICE, per_unit: 0.01 };
let host: Server;
let gw: TestGateway;

beforeAll(async () => {
  host = absurdHost();
  await new Promise<void>((r) => host.listen(0, '127.0.0.1', r));
  const origin = `http://127.0.0.1:${(host.address() as { port: number }).port}`;
  const offer = (provider: string, upstreamModel: string, pricing: object = PRICE) => [{ provider, upstreamModel, pricing }];
  gw = await startGateway({
    catalogue: () => ({
      providers: [
        { id: 'loud', type: 'openai', baseUrl: `${origin}/v1`, region: 'local' },
        { id: 'loudco', type: 'cohere', baseUrl: origin, region: 'local' },
      ],
      models: [
        { id: 'x/chat', kind: 'chat', owned_by: 'x', context_window: 8000, capabilities: ['streaming'], offers: offer('loud', 'chat') },
        { id: 'x/embed', kind: 'embedding', owned_by: 'x', context_window: 8000, capabilities: [], offers: offer('loud', 'embed') },
        { id: 'x/rank-co', kind: 'rerank', owned_by: 'x', offers: offer('loudco', 'rank', UNIT_PRICE) },
        { id: 'x/rank-tokens', kind: 'rerank', owned_by: 'x', offers: offer('loud', 'rank') },
        { id: 'x/listen', kind: 'audio', owned_by: 'x', offers: offer('loud', 'listen', UNIT_PRICE) },
        { id: 'x/listen-tokens', kind: 'audio', owned_by: 'x', offers: offer('loud', 'listen-tokens') },
      ],
    }),
  });
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await gw?.sim.close();
  host?.close();
});

async function recordOf(keyId: string) {
  await gw.gateway.services.usage.flush();
  const [record] = await gw.gateway.services.store.usage.list({ keyId });
  return record;
}

async function spentOf(keyId: string): Promise<number> {
  return (await gw.admin<{ spent: number }>('GET', `/keys/${keyId}`)).body.spent;
}

describe('a provider that reports more usage than the request could cost', () => {
  it('a chat prompt is billed, told and spent at most its bytes and template, streamed or not, in both variants', async () => {
    const messages = [{ role: 'user' as const, content: 'Say hi in two words.' }];
    for (const [base, stream] of [
      [gw.baseA, false],
      [gw.baseA, true],
      [gw.baseB, false],
      [gw.baseB, true],
    ] as const) {
      const budget = 5;
      const { id, key } = await gw.createKey({ budget });
      const client = new OpenAI({ apiKey: key, baseURL: base, maxRetries: 0 });
      let told: OpenAI.CompletionUsage | undefined;
      if (stream) {
        const chunks = await client.chat.completions.create({
          model: 'x/chat',
          messages,
          max_tokens: 10,
          stream: true,
          stream_options: { include_usage: true },
        });
        for await (const c of chunks) if (c.usage) told = c.usage;
      } else {
        told = (await client.chat.completions.create({ model: 'x/chat', messages, max_tokens: 10 })).usage;
      }
      const record = await recordOf(id);
      // The body's bytes, the template's 1,024 and 16 for the one message: a little over 1,100 tokens.
      expect(record?.promptTokens).toBeGreaterThan(1_040);
      expect(record?.promptTokens).toBeLessThan(1_300);
      expect(told).toMatchObject({ prompt_tokens: record?.promptTokens, completion_tokens: 5, total_tokens: (record?.promptTokens ?? 0) + 5 });
      expect(record?.cost).toBeCloseTo((((record?.promptTokens ?? 0) + 5) * 1000) / 1e6, 9);
      const spent = await spentOf(id);
      expect([base, stream, spent <= budget]).toEqual([base, stream, true]);
      expect(spent).toBeCloseTo(record?.cost ?? -1, 9);
    }
  });

  it('an honest count stands however far above the estimate: text at a token a byte, an image by URL at its largest', async () => {
    const text = '日本語の文章です。'.repeat(200);
    const bytes = Buffer.byteLength(text);
    for (const [content, reported] of [
      [`count ${bytes} ${text}`, bytes],
      [
        [
          { type: 'text', text: 'count 17000 describe it' },
          { type: 'image_url', image_url: { url: 'https://example.com/a.png' } },
        ],
        17_000,
      ],
    ] as const) {
      const { id, key } = await gw.createKey({ budget: 50 });
      const client = new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 0 });
      const answer = await client.chat.completions.create({ model: 'x/chat', messages: [{ role: 'user', content } as never], max_tokens: 10 });
      expect(answer.usage?.prompt_tokens).toBe(reported);
      expect((await recordOf(id))?.promptTokens).toBe(reported);
    }
  });

  it("an embedding is billed and told at most its texts' bytes", async () => {
    const { id, key } = await gw.createKey({ budget: 5 });
    const client = new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 0 });
    const answer = await client.embeddings.create({ model: 'x/embed', input: ['a fox', 'a hound'] });
    const record = await recordOf(id);
    expect(record?.promptTokens).toBeLessThan(200);
    expect(answer.usage.prompt_tokens).toBe(record?.promptTokens);
    expect(await spentOf(id)).toBeCloseTo(record?.cost ?? -1, 9);
    expect(await spentOf(id)).toBeLessThan(0.2);
  });

  it('a rerank is billed at most the search units and tokens its query and documents could cost', async () => {
    const { id, key } = await gw.createKey({ budget: 5 });
    const co = new CohereClient({ token: key, environment: gw.url, maxRetries: 0 });
    const units = await co.v2.rerank({ model: 'x/rank-co', query: 'fox', documents: ['a fox', 'a hound'] });
    expect(units.meta?.billedUnits?.searchUnits).toBe(1);
    expect(await recordOf(id)).toMatchObject({ units: 1, cost: 0.01 });
    const other = await gw.createKey({ budget: 5 });
    const byTokens = await new CohereClient({ token: other.key, environment: gw.url, maxRetries: 0 }).v2.rerank({
      model: 'x/rank-tokens',
      query: 'fox',
      documents: ['a fox', 'a hound'],
    });
    const record = await recordOf(other.id);
    expect(record?.promptTokens).toBeLessThan(300);
    expect(byTokens.meta?.billedUnits?.inputTokens).toBe(record?.promptTokens);
    expect(await spentOf(other.id)).toBeLessThan(0.3);
  });

  it('a transcription is billed at most the seconds its upload can hold, and the tokens of those seconds', async () => {
    const { id, key } = await gw.createKey({ budget: 5 });
    const client = new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 0 });
    const file = await toFile(wav(2), 'a.wav', { type: 'audio/wav' });
    await client.audio.transcriptions.create({ model: 'x/listen', file });
    // Two seconds of WAV, rounded up to a minute as a provider may bill.
    expect(await recordOf(id)).toMatchObject({ units: 60, cost: 0.6 });
    const other = await gw.createKey({ budget: 50 });
    const byTokens = new OpenAI({ apiKey: other.key, baseURL: gw.baseA, maxRetries: 0 });
    await byTokens.audio.transcriptions.create({ model: 'x/listen-tokens', file: await toFile(wav(2), 'a.wav', { type: 'audio/wav' }) });
    const record = await recordOf(other.id);
    // 60 s at 32 tokens a second and the template, both ways.
    expect(record?.promptTokens).toBeLessThan(3_000);
    expect(record?.completionTokens).toBe(60 * 32 + 1024);
    expect(await spentOf(other.id)).toBeLessThan(10);
  });
});
