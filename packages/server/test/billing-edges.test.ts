import { createServer, type Server } from 'node:http';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { estimatePromptTokens } from '../src/http/routes/chat-completions.js';
import { startGateway, type TestGateway } from './helpers/gateway.js';

/**
 * Hosts that report usage badly, as some OpenAI-compatible servers do: none at all (`quiet-*`), or far more than
 * the request could have produced (`loud-*`, a million completion tokens whatever `max_tokens` says).
 */
const ANSWER = 'A fox is a small omnivore with a bushy tail, found all over Europe.';
const LOUD = { prompt_tokens: 20, completion_tokens: 1_000_000, total_tokens: 1_000_020 };
/** `full-*`: an answer that fills the 8,000-token window, its prompt counted at far fewer tokens than the gateway estimates. */
const FULL = { prompt_tokens: 10, completion_tokens: 7_990, total_tokens: 8_000 };

function chunk(model: string, delta: object, usage?: object) {
  const choices = usage ? [] : [{ index: 0, delta, finish_reason: null }];
  return `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model, choices, ...(usage ? { usage } : {}) })}\n\n`;
}

function fakeHost(): Server {
  return createServer((req, res) => {
    let text = '';
    req.on('data', (d) => {
      text += d;
    });
    req.on('end', () => {
      const json = (status: number, body: unknown) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(body));
      };
      if (req.method === 'GET') {
        const ids = ['quiet-chat', 'loud-chat', 'full-chat', 'quiet-embed'];
        return json(200, { object: 'list', data: ids.map((id) => ({ id, object: 'model', created: 1, owned_by: 'fake' })) });
      }
      const body = JSON.parse(text) as { model: string; stream?: boolean; input?: unknown };
      const loud = body.model.startsWith('loud');
      const reported = loud ? LOUD : body.model.startsWith('full') ? FULL : undefined;
      if (req.url?.endsWith('/embeddings')) {
        const inputs = Array.isArray(body.input) ? body.input : [body.input];
        return json(200, { object: 'list', data: inputs.map((_, index) => ({ object: 'embedding', index, embedding: [0.1, 0.2] })), model: body.model });
      }
      if (body.stream) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(chunk(body.model, { role: 'assistant', content: ANSWER }));
        res.end(`${chunk(body.model, {}, reported)}data: [DONE]\n\n`);
        return;
      }
      const message = { role: 'assistant', content: ANSWER };
      json(200, {
        id: 'c1',
        object: 'chat.completion',
        created: 1,
        model: body.model,
        choices: [{ index: 0, message, finish_reason: 'stop' }],
        ...(reported ? { usage: reported } : {}),
      });
    });
  });
}

const PRICE = { prompt_per_1m: 1000, completion_per_1m: 1000, currency: 'EUR' };
let host: Server;
let gw: TestGateway;

beforeAll(async () => {
  host = fakeHost();
  await new Promise<void>((r) => host.listen(0, '127.0.0.1', r));
  const baseUrl = `http://127.0.0.1:${(host.address() as { port: number }).port}/v1`;
  gw = await startGateway({
    catalogue: () => ({
      providers: [{ id: 'fake', type: 'openai', baseUrl, region: 'local' }],
      models: [
        ...['quiet-chat', 'loud-chat', 'full-chat'].map((m) => ({
          id: `fam/${m}`,
          kind: 'chat' as const,
          owned_by: 'fam',
          context_window: 8000,
          capabilities: ['streaming'],
          offers: [{ provider: 'fake', upstreamModel: m, pricing: PRICE }],
        })),
        {
          id: 'fam/quiet-embed',
          kind: 'embedding' as const,
          owned_by: 'fam',
          context_window: 8000,
          capabilities: [],
          offers: [{ provider: 'fake', upstreamModel: 'quiet-embed', pricing: PRICE }],
        },
      ],
    }),
  });
});
afterAll(async () => {
  await gw?.close();
  await gw?.sim.close();
  host?.close();
});

const messages = [{ role: 'user' as const, content: 'Tell me about foxes.' }];

async function recordsOf(keyId: string) {
  await gw.gateway.services.usage.flush();
  return gw.gateway.services.store.usage.list({ keyId });
}

describe('a host that reports no usage', () => {
  it('a chat answer is answered and billed at the gateway’s estimate, as a cut stream is, not for free', async () => {
    const { id, key } = await gw.createKey();
    const client = new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 0 });
    const answer = await client.chat.completions.create({ model: 'fam/quiet-chat', messages, max_tokens: 100 });
    const completion = Math.ceil(ANSWER.length / 4);
    const prompt = estimatePromptTokens({ messages });
    expect(answer.usage).toEqual({ prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion });
    const [record] = await recordsOf(id);
    expect(record).toMatchObject({ promptTokens: prompt, completionTokens: completion });
    expect(record?.cost).toBeCloseTo(((prompt + completion) * 1000) / 1e6, 9);
  });

  it('an embedding is billed at the estimate its hold used', async () => {
    const { id, key } = await gw.createKey();
    const res = await fetch(`${gw.baseA}/embeddings`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'fam/quiet-embed', input: ['the first text to embed', 'a second one'] }),
    });
    const body = (await res.json()) as { usage: { prompt_tokens: number } };
    expect(body.usage.prompt_tokens).toBeGreaterThan(0);
    const [record] = await recordsOf(id);
    expect(record?.promptTokens).toBe(body.usage.prompt_tokens);
    expect(record?.cost).toBeGreaterThan(0);
  });
});

describe('a request without max_tokens', () => {
  it("is billed, and told, the completion the provider counts up to what the window leaves after the provider's prompt count, not the gateway's estimate", async () => {
    // About 1,000 tokens by the gateway's estimate (3 characters a token); the host counts 10.
    const long = [{ role: 'user' as const, content: 'Tell me about foxes. '.repeat(150) }];
    expect(estimatePromptTokens({ messages: long })).toBeGreaterThan(900);
    for (const [model, completion] of [
      ['fam/full-chat', FULL.completion_tokens],
      // A count past the window is billed at what the window leaves: 8,000 less the host's 20.
      ['fam/loud-chat', 8_000 - LOUD.prompt_tokens],
    ] as const) {
      for (const stream of [false, true]) {
        const { id, key } = await gw.createKey({ budget: 1_000 });
        const res = await fetch(`${gw.baseA}/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model, messages: long, stream, ...(stream ? { stream_options: { include_usage: true } } : {}) }),
        });
        expect(res.status).toBe(200);
        const text = await res.text();
        const [record] = await recordsOf(id);
        expect([model, stream, record?.completionTokens]).toEqual([model, stream, completion]);
        // The client is told what it is billed.
        const usageLine = text.split('\n').find((line) => line.startsWith('data: ') && line.includes('"usage"'));
        const told = stream
          ? (JSON.parse(usageLine?.slice('data: '.length) ?? '{}') as { usage?: unknown }).usage
          : (JSON.parse(text) as { usage: unknown }).usage;
        expect(told).toMatchObject({ completion_tokens: completion, total_tokens: (record?.promptTokens ?? 0) + completion });
      }
    }
  });
});

describe('a host that reports more than the request could cost', () => {
  it('is billed no more completion tokens than max_tokens allows, streamed or not: a budget is not spent on a count the request could not reach', async () => {
    for (const stream of [false, true]) {
      const budget = 0.5;
      const { id, key } = await gw.createKey({ budget });
      const res = await fetch(`${gw.baseA}/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'fam/loud-chat', messages, max_tokens: 10, stream }),
      });
      expect(res.status).toBe(200);
      await res.text();
      const [record] = await recordsOf(id);
      // The provider's prompt count stands; its completion count (a million) is held to the request's cap.
      expect([record?.promptTokens, record?.completionTokens]).toEqual([LOUD.prompt_tokens, 10]);
      expect(record?.cost).toBeCloseTo(((LOUD.prompt_tokens + 10) * 1000) / 1e6, 9);
      const { spent } = (await gw.admin<{ spent: number }>('GET', `/keys/${id}`)).body;
      expect(spent).toBeLessThanOrEqual(budget);
      expect(spent).toBeCloseTo(record?.cost ?? -1, 9);
    }
  });
});
