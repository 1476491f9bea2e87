import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { type Simulator, startSimulator } from '@gw/simulator';
import { streamText } from 'ai';
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';
import { exchange } from './helpers/raw-http.js';
import { openAiClients } from './helpers/sdk.js';
import { readSse, type SseEvent, streamRequest } from './helpers/sse.js';

let sim: Simulator;
let gw: TestGateway;
let key: string;
let a: OpenAI;
let b: OpenAI;

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  gw = await startGateway({ sim, env: { GW_STREAM_HEARTBEAT_MS: '150' } });
  key = (await gw.createKey({ rateLimitRpm: 1000 })).key;
  ({ a, b } = openAiClients(gw, key));
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await sim?.close();
});
beforeEach(() => resetProviders(sim));

const MODEL = 'meta/llama-3.3-70b';
const messages = [{ role: 'user' as const, content: 'Tell me about streaming gateways in Europe' }];

async function usageOf(requestId: string) {
  await gw.gateway.services.usage.flush();
  return gw.gateway.services.store.usage.list({ requestId });
}

/** Answered chat completions on variant A with status 200, as /metrics counts them. */
async function streamsCounted(): Promise<number> {
  const text = await (await fetch(`${gw.url}/metrics`)).text();
  const line = text
    .split('\n')
    .find((l) => l.startsWith('gw_http_requests_total{') && l.includes('route="/v1/chat/completions"') && l.includes('status="200"'));
  return Number(line?.split(' ').at(-1) ?? 0);
}

describe('streaming chat with the official openai SDK', () => {
  it('relays chunks with the gateway model id, the SSE headers, and bills from the provider’s count', async () => {
    const before = await streamsCounted();
    const { data: stream, response } = await a.chat.completions.create({ model: MODEL, messages, stream: true }).withResponse();
    expect(response.headers.get('content-type')).toMatch(/^text\/event-stream/);
    expect(response.headers.get('cache-control')).toBe('no-cache');
    expect(response.headers.get('x-accel-buffering')).toBe('no');
    expect(response.headers.get('x-gateway-provider')).toBe('scaleway');
    expect(response.headers.get('x-ratelimit-limit')).toBe('1000');
    expect(response.headers.get('server-timing')).toMatch(/^gw;desc="gateway";dur=[\d.]+, upstream;dur=[\d.]+, total;dur=[\d.]+$/);
    let text = '';
    let usageChunks = 0;
    for await (const chunk of stream) {
      expect(chunk.model).toBe(MODEL);
      expect(chunk.object).toBe('chat.completion.chunk');
      if (chunk.usage) usageChunks++;
      text += chunk.choices[0]?.delta.content ?? '';
    }
    expect(text.length).toBeGreaterThan(10);
    expect(usageChunks).toBe(0);
    // The gateway asked the provider for usage although the client did not.
    expect((sim.providers.scaleway?.stats().last?.body as { stream_options?: unknown } | undefined)?.stream_options).toEqual({ include_usage: true });
    const [record] = await usageOf(response.headers.get('x-request-id') as string);
    expect(record).toMatchObject({ streamed: true, provider: 'scaleway', status: 200, errorCode: null });
    // The stream, written by the route itself, still ran the end-of-response hooks (the metrics count it).
    expect(await streamsCounted()).toBe(before + 1);
    expect(record?.completionTokens).toBeGreaterThan(0);
  });

  it('hands the usage chunk to clients that ask for it (variant B)', async () => {
    const stream = await b.chat.completions.create({ model: MODEL, messages, stream: true, stream_options: { include_usage: true } });
    const usage = [];
    for await (const chunk of stream) if (chunk.usage) usage.push(chunk);
    expect(usage).toHaveLength(1);
    expect(usage[0]?.choices).toEqual([]);
    expect(usage[0]?.usage?.total_tokens).toBeGreaterThan(0);
  });

  it('normalises reasoning deltas to reasoning_content', async () => {
    for (const provider of ['ovh', 'nebius']) {
      const stream = await a.chat.completions.create(
        { model: 'deepseek/r1-distill-70b', messages, stream: true },
        { headers: { 'X-Gateway-Provider': provider } },
      );
      let reasoning = '';
      for await (const chunk of stream) {
        const delta = chunk.choices[0]?.delta as Record<string, unknown> | undefined;
        expect(delta?.reasoning).toBeUndefined();
        if (typeof delta?.reasoning_content === 'string') reasoning += delta.reasoning_content;
      }
      expect(reasoning.length, provider).toBeGreaterThan(0);
    }
  });

  it('a stream cut before its usage is billed at an estimate that never passes max_tokens, which its budget hold covered', async () => {
    sim.providers.scaleway?.setFault({ kind: 'truncate' });
    const { response } = await a.chat.completions
      .create({ model: MODEL, messages, stream: true, max_tokens: 3 }, { headers: { 'X-Gateway-Provider': 'scaleway' } })
      .withResponse();
    const relayed = (await response.text())
      .split('\n')
      .filter((l) => l.startsWith('data: {'))
      .map((l) => (JSON.parse(l.slice(6)) as { choices?: { delta?: { content?: string } }[] }).choices?.[0]?.delta?.content ?? '')
      .join('');
    // More than 3 tokens' worth of text was relayed (4 characters a token): the estimate alone would say more.
    expect(relayed.length).toBeGreaterThan(3 * 4);
    const [record] = await usageOf(response.headers.get('x-request-id') as string);
    expect(record?.errorCode).toBe('upstream_failed');
    expect(record?.completionTokens).toBe(3);
  });

  it('errors before the first byte answer JSON in the envelope; after it, an error event the SDK throws', async () => {
    sim.providers.scaleway?.setFault({ kind: 'status', status: 500 });
    const before = await a.chat.completions
      .create({ model: MODEL, messages, stream: true }, { headers: { 'X-Gateway-Provider': 'scaleway' } })
      .catch((e: unknown) => e);
    expect((before as InstanceType<typeof OpenAI.APIError>).status).toBe(502);
    expect((before as InstanceType<typeof OpenAI.APIError>).code).toBe('provider_down');
    // Recorded as the stream it was asked to be, though no event went out.
    const [failed] = await usageOf((before as InstanceType<typeof OpenAI.APIError>).requestID as string);
    expect(failed).toMatchObject({ status: 502, errorCode: 'upstream_failed', streamed: true, cost: 0 });
    sim.providers.scaleway?.setFault({ kind: 'error_after_200', afterChunks: 3 });
    const { data: stream, response } = await a.chat.completions.create({ model: MODEL, messages, stream: true }).withResponse();
    let got = 0;
    const err = await (async () => {
      for await (const _ of stream) got++;
    })().catch((e: unknown) => e);
    expect(got).toBeGreaterThan(0);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    // The error event speaks the variant's codes, as its errors before the first byte do.
    expect((err as InstanceType<typeof OpenAI.APIError>).code).toBe('provider_down');
    expect((err as InstanceType<typeof OpenAI.APIError>).type).toBe('provider_down');
    // The message says once what happened, then the provider's own words.
    expect((err as Error).message).toBe('The upstream provider failed mid-stream: scaleway sent an error in its stream: Internal server error.');
    const [record] = await usageOf(response.headers.get('x-request-id') as string);
    expect(record?.errorCode).toBe('upstream_failed');
    const errB = await (async () => {
      for await (const _ of await b.chat.completions.create({ model: MODEL, messages, stream: true })) {
        // drain until the error event
      }
    })().catch((e: unknown) => e);
    expect((errB as InstanceType<typeof OpenAI.APIError>).code).toBe('upstream_unavailable');
    expect((errB as InstanceType<typeof OpenAI.APIError>).type).toBe('upstream_error');
  });

  it('fails over when a provider dies before its first chunk', async () => {
    sim.providers.scaleway?.setFault({ kind: 'reset' });
    const { data: stream, response } = await b.chat.completions.create({ model: MODEL, messages, stream: true }).withResponse();
    for await (const _ of stream) {
      // drain
    }
    expect(response.headers.get('x-gateway-provider')).toBe('ovh');
    expect(response.headers.get('x-gateway-routing-hops')).toBe('1');
  });

  it('n > 1 streams every choice: the SDK assembles each as the whole answer has it, reasoning between <think> tags split per choice', async () => {
    sim.providers.ovh?.configure({ reasoningStyle: 'think_tags' });
    try {
      const req = { model: 'deepseek/r1-distill-70b', messages, n: 2 };
      const whole = await b.chat.completions.create(req, { headers: { 'X-Gateway-Provider': 'ovh' } });
      const { data: stream, response } = await b.chat.completions
        .create({ ...req, stream: true, stream_options: { include_usage: true } }, { headers: { 'X-Gateway-Provider': 'ovh' } })
        .withResponse();
      const got = new Map<number, { content: string; reasoning: string; finish: string | null }>();
      let usage: OpenAI.CompletionUsage | undefined;
      for await (const chunk of stream) {
        if (chunk.usage) usage = chunk.usage;
        for (const c of chunk.choices) {
          const seen = got.get(c.index) ?? { content: '', reasoning: '', finish: null };
          seen.content += c.delta.content ?? '';
          seen.reasoning += (c.delta as { reasoning_content?: string }).reasoning_content ?? '';
          seen.finish = c.finish_reason ?? seen.finish;
          got.set(c.index, seen);
        }
      }
      const asWhole = whole.choices.map((c) => ({
        content: c.message.content,
        reasoning: (c.message as { reasoning_content?: string }).reasoning_content,
        finish: c.finish_reason,
      }));
      expect(asWhole).toHaveLength(2);
      expect(asWhole[1]?.content).toContain('#2');
      expect([...got.keys()].sort()).toEqual([0, 1]);
      expect([got.get(0), got.get(1)]).toEqual(asWhole);
      expect(usage?.completion_tokens).toBe(whole.usage?.completion_tokens);
      const [record] = await usageOf(response.headers.get('x-request-id') as string);
      expect(record?.completionTokens).toBe(whole.usage?.completion_tokens);
    } finally {
      sim.providers.ovh?.configure({ reasoningStyle: 'reasoning_content' });
    }
  });

  it('works with the Vercel AI SDK’s streamText', async () => {
    const provider = createOpenAICompatible({ name: 'gw', baseURL: gw.baseA, apiKey: key, includeUsage: true });
    const result = streamText({ model: provider(MODEL), prompt: 'Bonjour from the AI SDK' });
    let text = '';
    for await (const part of result.textStream) text += part;
    expect(text.length).toBeGreaterThan(5);
    expect((await result.usage).totalTokens).toBeGreaterThan(0);
  });
});

describe('raw event stream', () => {
  it('every event carries an id naming the stream and its position, and ends with [DONE]', async () => {
    const res = await streamRequest(gw.baseA, key, { model: MODEL, messages, stream: true });
    const events = await readSse(res);
    const requestId = res.headers.get('x-request-id');
    expect(events.length).toBeGreaterThan(3);
    const seqs = events.map((e) => {
      expect(e.id?.startsWith(`${requestId}:`)).toBe(true);
      return Number(e.id?.split(':')[1]);
    });
    // Positions count every event of the stream; the usage chunk this client did not ask for is skipped.
    expect(seqs.slice(0, -1)).toEqual(seqs.slice(0, -1).map((_, i) => i + 1));
    expect(seqs.at(-1)).toBe(seqs.length + 1);
    expect(events.at(-1)?.data).toBe('[DONE]');
  });

  it('a stream pipelined behind a slower answer on one connection is answered in its turn, and so is what follows it', async () => {
    // The embeddings answer comes last: the streams' responses have no socket yet when their events are ready.
    for (const p of Object.values(sim.providers)) p.setFault({ kind: 'latency', ms: 500, endpoints: ['embeddings'] });
    const post = (path: string, body: object) => {
      const text = JSON.stringify(body);
      return `POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\n\r\n${text}`;
    };
    const requests = [
      post('/v1/embeddings', { model: 'mistral/embed', input: 'x' }),
      post('/v1/chat/completions', { model: MODEL, messages, stream: true }),
      post('/alt/v1/chat/completions', { model: MODEL, messages, stream: true }),
      `GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nConnection: close\r\n\r\n`,
    ];
    // The gateway closes after the last answer (Connection: close); a stream never answered leaves it open.
    const out = await exchange(Number(new URL(gw.url).port), requests.join(''), 5_000);
    // Not anchored: an answer with a Content-Length is followed by the next head on the same line.
    expect(out.match(/HTTP\/1\.1 \d{3}/g)).toEqual(['HTTP/1.1 200', 'HTTP/1.1 200', 'HTTP/1.1 200', 'HTTP/1.1 200']);
    expect(out.match(/data: \[DONE\]/g)).toHaveLength(2);
    expect(out).toContain('"object":"list"');
  });

  it('sends an SSE comment during a long silence', async () => {
    sim.providers.scaleway?.setFault({ kind: 'stall', afterChunks: 2, ms: 700 });
    const res = await streamRequest(gw.baseA, key, { model: MODEL, messages, stream: true });
    const raw = await res.text();
    expect(raw).toContain(': keep-alive\n\n');
    expect(raw.trimEnd().endsWith('data: [DONE]')).toBe(true);
  });

  it('a resumed stream gets exactly the rest, with one upstream call and one charge', async () => {
    sim.providers.scaleway?.configure({ chunkGapMs: 15 });
    try {
      const body = { model: MODEL, messages, stream: true, max_tokens: 40 };
      const full = await readSse(await streamRequest(gw.baseA, key, body));
      sim.providers.scaleway?.resetStats();
      const controller = new AbortController();
      const first = await streamRequest(gw.baseA, key, body, {}, controller.signal);
      const requestId = first.headers.get('x-request-id') as string;
      const head: SseEvent[] = await readSse(first, 5);
      controller.abort();
      expect(head).toHaveLength(5);
      await new Promise((r) => setTimeout(r, 50));
      const rest = await readSse(await streamRequest(gw.baseB, key, body, { 'Last-Event-ID': head[4]?.id as string }));
      const seq = (e: SseEvent) => e.id?.split(':')[1];
      expect(rest.map((e) => e.id?.split(':')[0])).toEqual(rest.map(() => requestId));
      expect(rest.map(seq)).toEqual(full.slice(5).map(seq));
      expect([...head, ...rest].map((e) => e.data.replace(/"id":"[^"]*"|"created":\d+/g, ''))).toEqual(
        full.map((e) => e.data.replace(/"id":"[^"]*"|"created":\d+/g, '')),
      );
      expect(sim.providers.scaleway?.stats().byEndpoint.chat).toBe(1);
      const records = await usageOf(requestId);
      expect(records).toHaveLength(1);
      expect(records[0]?.errorCode).toBeNull();
    } finally {
      sim.providers.scaleway?.configure({ chunkGapMs: 0 });
    }
  });

  it('refuses an unknown id, and another key’s stream, in the variant’s envelope', async () => {
    const res = await streamRequest(gw.baseA, key, { model: MODEL, messages, stream: true });
    const events = await readSse(res);
    const other = (await gw.createKey()).key;
    for (const [k, id] of [
      [key, 'req_000000000000000000000000:3'],
      [key, `req_${'0'.repeat(28)}:3`],
      [other, events[1]?.id as string],
    ] as const) {
      const r = await streamRequest(gw.baseB, k, { model: MODEL, messages, stream: true }, { 'Last-Event-ID': id });
      expect(r.status).toBe(404);
      expect(((await r.json()) as { error: { code: string } }).error.code).toBe('stream_not_found');
    }
  });

  it('a Last-Event-ID no event of the gateway can have is the client’s 400 naming the header, in the variant’s envelope', async () => {
    const id = (await readSse(await streamRequest(gw.baseA, key, { model: MODEL, messages, stream: true })))[1]?.id as string;
    // Not an event id at all, a stream id without its position, a position past any stream, another format's id.
    for (const bad of ['garbage', id.split(':')[0] as string, `${id.split(':')[0]}:1234567890`, `${id}:1`, 'chatcmpl-abc:3', `${id} extra`]) {
      const a = await streamRequest(gw.baseA, key, { model: MODEL, messages, stream: true }, { 'Last-Event-ID': bad });
      expect([a.status, ((await a.json()) as { error: unknown }).error]).toEqual([
        400,
        expect.objectContaining({ code: 'validation_error', type: 'validation_error', param: 'Last-Event-ID' }),
      ]);
      const b = await streamRequest(gw.baseB, key, { model: MODEL, messages, stream: true }, { 'Last-Event-ID': bad });
      expect([b.status, ((await b.json()) as { error: unknown }).error]).toEqual([
        400,
        expect.objectContaining({ code: 'invalid_request', type: 'invalid_request_error', param: 'Last-Event-ID' }),
      ]);
    }
    // The OpenAI SDK raises its BadRequestError (a 404 was its NotFoundError, as for a stream gone), and does not retry it.
    const sdk = new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 2 });
    const refused = await sdk.chat.completions
      .create({ model: MODEL, messages, stream: true }, { headers: { 'Last-Event-ID': 'garbage' } })
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
    expect((refused as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('Last-Event-ID');
    // The well-formed id of a stream still resumes it, spaces around it included.
    const resumed = await readSse(await streamRequest(gw.baseA, key, { model: MODEL, messages, stream: true }, { 'Last-Event-ID': ` ${id} ` }));
    expect(resumed.at(-1)?.data).toBe('[DONE]');
  });
});
