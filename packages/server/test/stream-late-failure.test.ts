import type OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';
import { upstreamOutcomes } from './helpers/metrics.js';
import { openAiClients } from './helpers/sdk.js';

// A provider that fails after the answer is whole (every choice finished, its usage sent) but before `[DONE]`:
// the client still gets a normal end, and the request is recorded as the success it was.

let gw: TestGateway;
let key: string;
let a: OpenAI;
let b: OpenAI;

beforeAll(async () => {
  gw = await startGateway({
    catalogue: (c) => ({ ...c, providers: c.providers.map((p) => (p.id === 'mistral' || p.id === 'ovh' ? { ...p, timeoutMs: 600 } : p)) }),
  });
  key = (await gw.createKey({ rateLimitRpm: 1000 })).key;
  ({ a, b } = openAiClients(gw, key));
}, 60_000);
afterAll(() => gw?.close());
beforeEach(() => {
  resetProviders(gw.sim);
  gw.sim.providers.ovh?.configure({ chunkGapMs: 0 });
});

const messages = [{ role: 'user' as const, content: 'What is the weather in Lyon?' }];
const tools = [
  {
    type: 'function' as const,
    function: { name: 'get_weather', description: 'Weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
  },
];
/** Past the answer's last event: the simulator's faults cut in right before `[DONE]`. */
const BEFORE_DONE = 1000;

async function recordOf(requestId: string) {
  await gw.gateway.services.usage.flush();
  const records = await gw.gateway.services.store.usage.list({ requestId });
  expect(records).toHaveLength(1);
  return records[0];
}

/** Data events the provider answers `body` with, read straight from the simulator. */
async function upstreamEvents(provider: string, body: unknown): Promise<string[]> {
  const p = gw.sim.providers[provider];
  if (!p) throw new Error(provider);
  const res = await fetch(`${p.baseUrl}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${p.apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return (await res.text())
    .split('\n\n')
    .filter((block) => block.startsWith('data: ') && block !== 'data: [DONE]')
    .map((block) => block.slice(6));
}

describe('a stream whose provider fails after its answer is whole', () => {
  it('Mistral stalls past its timeout after the chunk carrying finish_reason and usage: a normal end, billed at its count', async () => {
    const before = await upstreamOutcomes(gw.url, 'mistral');
    gw.sim.providers.mistral?.setFault({ kind: 'stall', afterChunks: 2, ms: 1500 });
    const { data: stream, response } = await a.chat.completions
      .create({ model: 'mistral/medium', messages, tools, tool_choice: 'required', stream: true, stream_options: { include_usage: true } })
      .withResponse();
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(gw.sim.providers.mistral?.stats().faultsApplied).toBe(1);
    expect(chunks.some((c) => c.choices[0]?.finish_reason === 'tool_calls')).toBe(true);
    const usage = chunks.at(-1)?.usage;
    expect(chunks.at(-1)?.choices).toEqual([]);
    expect(usage?.completion_tokens).toBeGreaterThan(0);
    const record = await recordOf(response.headers.get('x-request-id') as string);
    expect(record).toMatchObject({ status: 200, errorCode: null, provider: 'mistral', streamed: true });
    // The provider's own count, not the gateway's estimate.
    expect(record?.promptTokens).toBe(usage?.prompt_tokens);
    expect(record?.completionTokens).toBe(usage?.completion_tokens);
    const after = await upstreamOutcomes(gw.url, 'mistral');
    expect(after['stream_ok']).toBe((before['stream_ok'] ?? 0) + 1);
    expect(after['stream_error'] ?? 0).toBe(before['stream_error'] ?? 0);
  });

  it('Mistral ends its response without [DONE] (variant B, usage not asked): the answer ends normally', async () => {
    gw.sim.providers.mistral?.setFault({ kind: 'truncate', afterChunks: BEFORE_DONE });
    const { data: stream, response } = await b.chat.completions.create({ model: 'mistral/medium', messages, stream: true, max_tokens: 20 }).withResponse();
    let text = '';
    let finish: string | null | undefined = null;
    for await (const chunk of stream) {
      expect(chunk.usage ?? null).toBeNull();
      text += chunk.choices[0]?.delta.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect(text).toMatch(/\S/);
    expect(finish).not.toBeNull();
    expect(await recordOf(response.headers.get('x-request-id') as string)).toMatchObject({ status: 200, errorCode: null });
  });

  it('a vLLM host (OVH) whose connection resets after its usage chunk: a normal end, billed at its count', async () => {
    // Chunks spaced out, so that the reset does not overtake them on the wire.
    gw.sim.providers.ovh?.configure({ chunkGapMs: 5 });
    gw.sim.providers.ovh?.setFault({ kind: 'reset', afterChunks: BEFORE_DONE });
    const { data: stream, response } = await a.chat.completions
      .create(
        { model: 'meta/llama-3.3-70b', messages, stream: true, n: 2, max_tokens: 12, stream_options: { include_usage: true } },
        { headers: { 'X-Gateway-Provider': 'ovh' } },
      )
      .withResponse();
    const finished = new Set<number>();
    let usage: OpenAI.CompletionUsage | undefined | null;
    for await (const chunk of stream) {
      for (const c of chunk.choices) if (c.finish_reason) finished.add(c.index);
      usage = chunk.usage ?? usage;
    }
    expect(gw.sim.providers.ovh?.stats().faultsApplied).toBe(1);
    expect([...finished].sort()).toEqual([0, 1]);
    const record = await recordOf(response.headers.get('x-request-id') as string);
    expect(record).toMatchObject({ status: 200, errorCode: null, provider: 'ovh' });
    expect(record?.completionTokens).toBe(usage?.completion_tokens);
  });

  it('a vLLM host (OVH) that stalls after its finish chunks but before its usage chunk: a normal end, billed at the gateway’s estimate', async () => {
    const ask = { model: 'meta/llama-3.3-70b', messages, stream: true as const, max_tokens: 12 };
    // The upstream body the gateway sends (usage asked for), to find where the provider's usage chunk sits.
    await a.chat.completions.create(ask, { headers: { 'X-Gateway-Provider': 'ovh' } }).then(async (s) => {
      for await (const _ of s);
    });
    const sent = gw.sim.providers.ovh?.stats().last?.body as Record<string, unknown>;
    expect(sent['stream_options']).toEqual({ include_usage: true });
    const events = await upstreamEvents('ovh', sent);
    expect(JSON.parse(events.at(-1) as string).usage.completion_tokens).toBeGreaterThan(0);
    expect(JSON.parse(events.at(-2) as string).choices[0].finish_reason).toMatch(/^(stop|length)$/);
    gw.sim.providers.ovh?.setFault({ kind: 'stall', afterChunks: events.length - 1, ms: 1500 });

    const { data: stream, response } = await a.chat.completions
      .create({ ...ask, stream_options: { include_usage: true } }, { headers: { 'X-Gateway-Provider': 'ovh' } })
      .withResponse();
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(gw.sim.providers.ovh?.stats().faultsApplied).toBe(1);
    const text = chunks.map((c) => c.choices[0]?.delta.content ?? '').join('');
    const usage = chunks.at(-1)?.usage;
    // The usage chunk the client gets is the estimate the stream is billed at: one token per 4 characters relayed, at most max_tokens.
    expect(text).toMatch(/\S/);
    expect(usage?.completion_tokens).toBe(Math.min(Math.ceil(text.length / 4), ask.max_tokens));
    const record = await recordOf(response.headers.get('x-request-id') as string);
    expect(record).toMatchObject({ status: 200, errorCode: null, provider: 'ovh' });
    expect(record?.completionTokens).toBe(usage?.completion_tokens);
    expect(record?.promptTokens).toBe(usage?.prompt_tokens);
  });

  it('a failure before every choice finished is still the error it was', async () => {
    gw.sim.providers.ovh?.setFault({ kind: 'truncate', afterChunks: 3 });
    const stream = await a.chat.completions.create(
      { model: 'meta/llama-3.3-70b', messages, stream: true, n: 2, max_tokens: 12 },
      { headers: { 'X-Gateway-Provider': 'ovh' } },
    );
    const chunks = [];
    await expect(async () => {
      for await (const chunk of stream) chunks.push(chunk);
    }).rejects.toThrow(/failed mid-stream/);
    expect(chunks.length).toBeGreaterThan(0);
  });
});
