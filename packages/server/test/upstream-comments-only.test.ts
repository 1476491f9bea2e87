import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { ModelConfig } from '@gw/schema';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';
import { answerModelList, startRawUpstream } from './helpers/raw-upstream.js';

/**
 * An OpenAI-compatible host that answers a stream request at once (200, `text/event-stream`) and then sends
 * SSE comments every 100 ms: for ever (`comments`), for a while before its answer (`late`), or between its
 * first chunk and the rest (`gap`); or that opens with its role chunk (no content yet) and then sends comments,
 * for ever (`opened`) or for a while before its answer (`hesitant`). Each comment resets the read timeout, so
 * only a bound on the wait for the answer's first chunk ends `comments` and `opened`; the client, which gets no
 * headers before it, would wait for good.
 */
const TIMEOUT_MS = 600;
const COMMENT_EVERY_MS = 100;
const PRICE = { prompt_per_1m: 1000, completion_per_1m: 2000, currency: 'EUR' };
const USAGE = { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 };

const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
  `data: ${JSON.stringify({ id: 's1', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
const answer = (words: string[]) =>
  words.map((w) => chunk({ content: w })).join('') +
  chunk({}, 'stop') +
  `data: ${JSON.stringify({ id: 's1', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [], usage: USAGE })}\n\ndata: [DONE]\n\n`;

/** Upstream requests whose connection the gateway closed before their answer ended, by upstream model. */
const cut: Record<string, number> = {};

/** Writes `: keep-alive` every 100 ms for `ms` (for ever without it), then calls `then`; stops when the gateway goes. */
function comments(res: ServerResponse, ms: number | null, then: () => void): void {
  const started = Date.now();
  const timer = setInterval(() => {
    if (ms !== null && Date.now() - started >= ms) {
      clearInterval(timer);
      then();
    } else res.write(': keep-alive\n\n');
  }, COMMENT_EVERY_MS);
  res.on('close', () => clearInterval(timer));
}

function serve(req: IncomingMessage, res: ServerResponse, body: string) {
  if (req.method === 'GET') return answerModelList(res, ['comments', 'quiet', 'filtered', 'late', 'gap', 'opened', 'hesitant', 'ok']);
  const { model, stream } = JSON.parse(body) as { model: string; stream?: boolean };
  if (model === 'ok' && !stream) {
    res.writeHead(200, { 'content-type': 'application/json' });
    const message = { role: 'assistant', content: 'good answer' };
    res.end(JSON.stringify({ id: 'c1', object: 'chat.completion', created: 1, model, choices: [{ index: 0, message, finish_reason: 'stop' }], usage: USAGE }));
    return;
  }
  res.on('close', () => {
    if (!res.writableEnded) cut[model] = (cut[model] ?? 0) + 1;
  });
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  // `quiet` is `comments` as another offer, with a circuit of its own.
  if (model === 'comments' || model === 'quiet') comments(res, null, () => {});
  else if (model === 'filtered') {
    // Azure's first event: the prompt's filter results, no choices, so nothing for the client; then only comments.
    res.write(`data: ${JSON.stringify({ id: '', object: '', created: 0, model: '', choices: [], prompt_filter_results: [{ prompt_index: 0 }] })}\n\n`);
    comments(res, null, () => {});
  } else if (model === 'late') comments(res, TIMEOUT_MS / 2, () => res.end(answer(['late ', 'answer'])));
  else if (model === 'gap') {
    res.write(chunk({ role: 'assistant', content: 'first ' }));
    comments(res, TIMEOUT_MS * 3, () => res.end(answer(['then ', 'the rest'])));
  } else if (model === 'opened' || model === 'hesitant') {
    // What most providers send first: the role, and no content yet.
    res.write(chunk({ role: 'assistant', content: '' }));
    comments(res, model === 'opened' ? null : TIMEOUT_MS / 2, () => res.end(answer(['after ', 'a while'])));
  } else res.end(answer(['good ', 'answer']));
}

function model(id: string, offers: [string, string][]): ModelConfig {
  return {
    id: `chatty/${id}`,
    kind: 'chat',
    owned_by: 'test',
    context_window: 8000,
    capabilities: ['streaming'],
    offers: offers.map(([provider, upstreamModel]) => ({ provider, upstreamModel, pricing: PRICE })),
  };
}

let upstream: Server;
let gw: TestGateway;

beforeAll(async () => {
  const started = await startRawUpstream(serve);
  upstream = started.server;
  const baseUrl = started.baseUrl;
  gw = await startGateway({
    catalogue: () => ({
      providers: [
        { id: 'chatter', type: 'openai', baseUrl, region: 'fr-par', apiKey: '', timeoutMs: TIMEOUT_MS },
        { id: 'steady', type: 'openai', baseUrl, region: 'fr-par', apiKey: '', timeoutMs: TIMEOUT_MS },
        // Azure's stream decoder drops its filter-results event (no choices): an event that gives the client no chunk.
        { id: 'azurish', type: 'azure', baseUrl: new URL(baseUrl).origin, region: 'swedencentral', apiKey: 'azure-key', timeoutMs: TIMEOUT_MS },
      ],
      models: [
        model('comments', [['chatter', 'comments']]),
        model('filtered', [['azurish', 'filtered']]),
        model('failover', [
          ['chatter', 'comments'],
          ['steady', 'ok'],
        ]),
        model('quiet', [['chatter', 'quiet']]),
        model('late', [['chatter', 'late']]),
        model('gap', [['chatter', 'gap']]),
        model('opened', [['chatter', 'opened']]),
        model('opened-failover', [
          ['chatter', 'opened'],
          ['steady', 'ok'],
        ]),
        model('hesitant', [['chatter', 'hesitant']]),
      ],
    }),
  });
});
afterAll(async () => {
  await gw?.close();
  await gw?.sim.close();
  upstream?.close();
});

const messages = [{ role: 'user' as const, content: 'hi' }];
const spent = async (id: string) => (await gw.admin<{ spent: number }>('GET', `/keys/${id}`)).body.spent;

/** The SDK's error's status and code (it must be the SDK's API error). */
function statusAndCode(err: unknown): [number | undefined, string | null | undefined] {
  expect(err).toBeInstanceOf(OpenAI.APIError);
  const e = err as InstanceType<typeof OpenAI.APIError>;
  return [e.status, e.code];
}

describe('an upstream stream that sends only comments', () => {
  it('fails as an upstream timeout within the provider’s timeoutMs: a 504 for the client, the upstream request closed, nothing billed', async () => {
    const { id, key } = await gw.createKey();
    for (const base of [gw.baseA, gw.baseB]) {
      const client = new OpenAI({ apiKey: key, baseURL: base, maxRetries: 0, timeout: 20_000 });
      const before = cut['comments'] ?? 0;
      const started = Date.now();
      const err = await client.chat.completions.create({ model: 'chatty/comments', messages, stream: true }).catch((e: unknown) => e);
      expect(statusAndCode(err)).toEqual([504, 'upstream_timeout']);
      expect((err as Error).message).toContain('did not answer in time (tried: chatter)');
      // The bound counts from the answer's headers, whatever the comments: not reset by each of them.
      expect(Date.now() - started).toBeGreaterThanOrEqual(TIMEOUT_MS - 50);
      expect(Date.now() - started).toBeLessThan(TIMEOUT_MS + 1500);
      await eventually(() => expect(cut['comments']).toBe(before + 1));
    }
    await new Promise((r) => setTimeout(r, 200));
    expect(await spent(id)).toBe(0);
  });

  it('after a first event that gives the client nothing (Azure’s filter results): the same timeout, counted from the answer’s start', async () => {
    const { id, key } = await gw.createKey();
    const client = new OpenAI({ apiKey: key, baseURL: gw.baseB, maxRetries: 0, timeout: 20_000 });
    const before = cut['filtered'] ?? 0;
    const started = Date.now();
    const err = await client.chat.completions.create({ model: 'chatty/filtered', messages, stream: true }).catch((e: unknown) => e);
    expect(statusAndCode(err)).toEqual([504, 'upstream_timeout']);
    expect(Date.now() - started).toBeLessThan(TIMEOUT_MS + 1500);
    await eventually(() => expect(cut['filtered']).toBe(before + 1));
    await new Promise((r) => setTimeout(r, 200));
    expect(await spent(id)).toBe(0);
  });

  it('fails over to the next offer, which answers and alone is billed', async () => {
    const { id, key } = await gw.createKey();
    const res = await fetch(`${gw.baseA}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-gateway-provider-prefer': 'chatter' },
      body: JSON.stringify({ model: 'chatty/failover', messages, stream: true, stream_options: { include_usage: true } }),
    });
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toContain('"content":"good "');
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    // 11 prompt tokens at 1000/M and 7 completion tokens at 2000/M, once.
    await eventually(async () => expect(await spent(id)).toBeCloseTo(0.025, 9));
  });
});

describe('an upstream stream that sends its role chunk and then only comments', () => {
  it('fails as an upstream timeout within the provider’s timeoutMs, as one that sends nothing: a 504, nothing billed', async () => {
    const { id, key } = await gw.createKey();
    const client = new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 0, timeout: 20_000 });
    const before = cut['opened'] ?? 0;
    const started = Date.now();
    const err = await client.chat.completions.create({ model: 'chatty/opened', messages, stream: true }).catch((e: unknown) => e);
    expect(statusAndCode(err)).toEqual([504, 'upstream_timeout']);
    expect(Date.now() - started).toBeGreaterThanOrEqual(TIMEOUT_MS - 50);
    expect(Date.now() - started).toBeLessThan(TIMEOUT_MS + 1500);
    await eventually(() => expect(cut['opened']).toBe(before + 1));
    await new Promise((r) => setTimeout(r, 200));
    expect(await spent(id)).toBe(0);
  });

  it('fails over to the next offer, whose stream alone the client gets, billed once', async () => {
    const { id, key } = await gw.createKey();
    const client = new OpenAI({ apiKey: key, baseURL: gw.baseB, maxRetries: 0, timeout: 20_000 });
    const { data: stream, response } = await client.chat.completions
      .create({ model: 'chatty/opened-failover', messages, stream: true }, { headers: { 'x-gateway-provider-prefer': 'chatter' } })
      .withResponse();
    const deltas = [];
    for await (const c of stream) deltas.push(c.choices[0]?.delta);
    expect(response.headers.get('x-gateway-provider')).toBe('steady');
    expect(response.headers.get('x-gateway-routing-hops')).toBe('1');
    // Steady's stream (no role chunk of its own): nothing of the offer that failed.
    expect(deltas.map((d) => d?.content ?? '').join('')).toBe('good answer');
    expect(deltas.some((d) => d?.role !== undefined)).toBe(false);
    // 11 prompt tokens at 1000/M and 7 completion tokens at 2000/M, once.
    await eventually(async () => expect(await spent(id)).toBeCloseTo(0.025, 9));
  });
});

describe('an event stream of comments answering a request that asked for no stream', () => {
  it('is refused at its headers and failed over, not read for as long as its comments come', async () => {
    const { id, key } = await gw.createKey();
    for (const base of [gw.baseA, gw.baseB]) {
      const client = new OpenAI({ apiKey: key, baseURL: base, maxRetries: 0, timeout: 10_000 });
      const before = cut['comments'] ?? 0;
      const started = Date.now();
      const { data, response } = await client.chat.completions
        .create({ model: 'chatty/failover', messages }, { headers: { 'x-gateway-provider-prefer': 'chatter' } })
        .withResponse();
      expect(data.choices[0]?.message.content).toBe('good answer');
      expect(response.headers.get('x-gateway-provider')).toBe('steady');
      // The comments reset the read timeout each time: only refusing the stream itself ends the wait for it.
      expect(Date.now() - started).toBeLessThan(TIMEOUT_MS);
      await eventually(() => expect(cut['comments']).toBe(before + 1));
    }
    // 11 prompt tokens at 1000/M and 7 completion tokens at 2000/M, for each of the two requests.
    await eventually(async () => expect(await spent(id)).toBeCloseTo(0.05, 9));
  });

  it('with no other offer: a 502 that names it, within the timeout, nothing billed', async () => {
    const { id, key } = await gw.createKey();
    for (const [base, code] of [
      [gw.baseA, 'provider_down'],
      [gw.baseB, 'upstream_unavailable'],
    ] as const) {
      const client = new OpenAI({ apiKey: key, baseURL: base, maxRetries: 0, timeout: 10_000 });
      const started = Date.now();
      const err = await client.chat.completions.create({ model: 'chatty/quiet', messages }).catch((e: unknown) => e);
      expect(statusAndCode(err)).toEqual([502, code]);
      expect((err as Error).message).toContain('chatter answered with an event stream, though no stream was asked for');
      expect(Date.now() - started).toBeLessThan(TIMEOUT_MS);
    }
    await new Promise((r) => setTimeout(r, 200));
    expect(await spent(id)).toBe(0);
  });
});

describe('comments that are not the whole stream', () => {
  it('before a first event that comes within timeoutMs: the answer is relayed whole', async () => {
    const { key } = await gw.createKey();
    const client = new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 0 });
    let text = '';
    for await (const c of await client.chat.completions.create({ model: 'chatty/late', messages, stream: true })) text += c.choices[0]?.delta.content ?? '';
    expect(text).toBe('late answer');
  });

  it('after a role chunk, before an answer that comes within timeoutMs: relayed whole, the role chunk first', async () => {
    const { key } = await gw.createKey();
    const client = new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 0 });
    const deltas = [];
    for await (const c of await client.chat.completions.create({ model: 'chatty/hesitant', messages, stream: true })) deltas.push(c.choices[0]?.delta);
    expect(deltas[0]).toEqual({ role: 'assistant', content: '' });
    expect(deltas.map((d) => d?.content ?? '').join('')).toBe('after a while');
  });

  it('between events, for longer than timeoutMs in all: the stream goes on as before', async () => {
    const { key } = await gw.createKey();
    const client = new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 0 });
    let text = '';
    for await (const c of await client.chat.completions.create({ model: 'chatty/gap', messages, stream: true })) text += c.choices[0]?.delta.content ?? '';
    expect(text).toBe('first then the rest');
  });
});
