import { type Simulator, startSimulator } from '@gw/simulator';
import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';
import { openAiClients } from './helpers/sdk.js';

const MODEL = 'meta/llama-3.3-70b'; // offers in order: scaleway, ovh, nebius
let sim: Simulator;
let gw: TestGateway;
let b: OpenAI;
let a: OpenAI;

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
}, 60_000);
afterAll(() => sim?.close());
// Each test starts with a gateway that has measured nothing yet.
beforeEach(async () => {
  for (const p of Object.values(sim.providers)) {
    p.clearFaults();
    p.resetStats();
    p.configure({ latencyMs: 0, ttftMs: 0, chunkGapMs: 0 });
  }
  // Circuits stay closed here (this file is about ordering); re-measuring is rare unless a test says otherwise.
  gw = await startGateway({ sim, env: { GW_CIRCUIT_FAILURES: '1000', GW_ROUTING_REMEASURE_MS: '600000' } });
  const { key } = await gw.createKey({ rateLimitRpm: 10_000 });
  ({ a, b } = openAiClients(gw, key));
}, 60_000);
afterEach(() => gw?.close());

const latencies = (ms: Record<string, number>) => {
  for (const [id, latencyMs] of Object.entries(ms)) sim.providers[id]?.configure({ latencyMs });
};

async function ask(client: OpenAI, strategy: string, body: Partial<OpenAI.ChatCompletionCreateParamsNonStreaming> = {}) {
  const { response } = await client.chat.completions
    .create({ model: MODEL, messages: [{ role: 'user', content: 'Route me well' }], ...body }, { headers: { 'X-Gateway-Strategy': strategy } })
    .withResponse();
  return {
    provider: response.headers.get('x-gateway-provider'),
    strategy: response.headers.get('x-gateway-strategy'),
    hops: response.headers.get('x-gateway-routing-hops'),
  };
}

async function firstByTtft(client: OpenAI): Promise<string | null> {
  const { data, response } = await client.chat.completions
    .create({ model: MODEL, messages: [{ role: 'user', content: 'Stream it' }], stream: true }, { headers: { 'X-Gateway-Strategy': 'fastest' } })
    .withResponse();
  for await (const _ of data) {
    // drain
  }
  return response.headers.get('x-gateway-provider');
}

describe('strategies through the official openai SDK', () => {
  it('default walks the configured order and is echoed in variant B only', async () => {
    expect(await ask(b, 'default')).toEqual({ provider: 'scaleway', strategy: 'default', hops: '0' });
    expect(await ask(a, 'default')).toEqual({ provider: 'scaleway', strategy: null, hops: null });
  });

  it('cheapest picks the lowest expected cost for this request’s size and max_tokens', async () => {
    // A long prompt with max_tokens 1: the prompt price decides (nebius 0.60 < ovh 0.67 < scaleway 0.80).
    const longPrompt = 'word '.repeat(4000);
    const byPrompt = await ask(b, 'cheapest', { messages: [{ role: 'user', content: longPrompt }], max_tokens: 1 });
    expect(byPrompt).toMatchObject({ provider: 'nebius', strategy: 'cheapest' });
    // A short prompt with a large max_tokens: the completion price decides (ovh 0.67 < scaleway 0.95 < nebius 1.20).
    expect(await ask(b, 'cheapest', { max_tokens: 4000 })).toMatchObject({ provider: 'ovh', strategy: 'cheapest' });
  });

  it('cheapest without max_tokens prices the completion at what the window leaves after the prompt', async () => {
    // About 120,000 of the 131,072-token window are prompt, leaving about 11,000 to complete: nebius (0.60 prompt, 1.20
    // completion) costs least. Priced at a completion of the whole window, ovh (0.67/0.67) looked cheaper.
    const longPrompt = 'word '.repeat(72_000);
    expect(await ask(b, 'cheapest', { messages: [{ role: 'user', content: longPrompt }] })).toMatchObject({ provider: 'nebius', strategy: 'cheapest' });
    // A short prompt leaves the window to the completion, whose price decides (ovh 0.67 < scaleway 0.95 < nebius 1.20).
    expect(await ask(b, 'cheapest')).toMatchObject({ provider: 'ovh', strategy: 'cheapest' });
  });

  it('fastest measures each offer, then takes the lowest moving latency, and moves when latencies change', async () => {
    latencies({ scaleway: 120, ovh: 60, nebius: 5 });
    const warmup = [];
    for (let i = 0; i < 5; i++) warmup.push((await ask(b, 'fastest')).provider);
    // Never-measured offers are tried first once each, in configured order; then the fastest.
    expect(warmup).toEqual(['scaleway', 'ovh', 'nebius', 'nebius', 'nebius']);
    latencies({ nebius: 400 });
    const slow = await ask(b, 'fastest');
    expect(slow.provider).toBe('nebius');
    // One 400 ms sample lifts nebius's average above ovh's 60 ms: the next request moves.
    expect((await ask(b, 'fastest')).provider).toBe('ovh');
    expect((await ask(b, 'fastest')).provider).toBe('ovh');
  });

  it('fastest times streams to their first token, apart from whole answers', async () => {
    for (const p of Object.values(sim.providers)) p.configure({ latencyMs: 0 });
    sim.providers.scaleway?.configure({ ttftMs: 5 });
    sim.providers.ovh?.configure({ ttftMs: 150 });
    sim.providers.nebius?.configure({ ttftMs: 80 });
    const seen = [];
    for (let i = 0; i < 5; i++) seen.push(await firstByTtft(b));
    expect(seen).toEqual(['scaleway', 'ovh', 'nebius', 'scaleway', 'scaleway']);
  });

  it('best prefers the highest recent success rate, then the lower latency', async () => {
    // Latencies far enough apart that a loaded machine's stall in one sample does not reorder them.
    latencies({ scaleway: 5, ovh: 150, nebius: 70 });
    // Measure all three (never-measured offers go first once each), then scaleway is best: all 100 %, fastest.
    const warmup = [];
    for (let i = 0; i < 4; i++) warmup.push((await ask(b, 'best')).provider);
    expect(warmup).toEqual(['scaleway', 'ovh', 'nebius', 'scaleway']);
    sim.providers.scaleway?.resetStats();
    sim.providers.scaleway?.setFault({ kind: 'status', status: 503, times: 1 });
    // scaleway fails once and the request fails over (nebius is next by latency).
    expect(await ask(b, 'best')).toMatchObject({ provider: 'nebius', hops: '1', strategy: 'best' });
    // Now scaleway's rate is 80 %: nebius (100 %, 70 ms) beats it although scaleway is faster, and beats ovh (100 %, 150 ms) on latency.
    expect((await ask(b, 'best')).provider).toBe('nebius');
    expect(sim.providers.scaleway?.stats().byEndpoint.chat).toBe(1);
  });

  it('an unknown strategy is a 400 in each variant’s envelope', async () => {
    for (const [client, code] of [
      [a, 'validation_error'],
      [b, 'invalid_request'],
    ] as const) {
      const err = (await ask(client, 'cheapest-ish').catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
      expect(err.status).toBe(400);
      expect(err.code).toBe(code);
      expect(err.param).toBe('X-Gateway-Strategy');
    }
    expect(sim.providers.scaleway?.stats().byEndpoint.chat).toBeUndefined();
  });
});

describe('fastest notices recovery', () => {
  let client: OpenAI;
  beforeEach(async () => {
    await gw.close();
    gw = await startGateway({ sim, env: { GW_CIRCUIT_FAILURES: '1000', GW_ROUTING_REMEASURE_MS: '150' } });
    client = new OpenAI({ apiKey: (await gw.createKey({ rateLimitRpm: 10_000 })).key, baseURL: gw.baseB, maxRetries: 0 });
  }, 60_000);

  /** Requests until `provider` served the last `run` of them in a row; returns how many were sent. */
  async function settleOn(provider: string, run: number, limit: number): Promise<number> {
    let streak = 0;
    for (let n = 1; n <= limit; n++) {
      streak = (await ask(client, 'fastest')).provider === provider ? streak + 1 : 0;
      if (streak === run) return n;
    }
    throw new Error(`${provider} did not serve ${run} requests in a row within ${limit}`);
  }

  it('moves away from a provider that slowed down, re-measures it now and then, and comes back once it is fast again', async () => {
    latencies({ scaleway: 150, ovh: 60, nebius: 5 });
    await settleOn('nebius', 3, 10);
    latencies({ nebius: 500 });
    expect(await settleOn('ovh', 1, 3)).toBeLessThanOrEqual(2);
    sim.providers.nebius?.resetStats();
    // While nebius is slow, requests stay on ovh; nebius only gets the occasional re-measure.
    const meanwhile = [];
    for (let i = 0; i < 30; i++) meanwhile.push((await ask(client, 'fastest')).provider);
    expect(meanwhile.filter((p) => p === 'ovh').length).toBeGreaterThanOrEqual(24);
    expect(sim.providers.nebius?.stats().byEndpoint.chat).toBeGreaterThanOrEqual(1);
    latencies({ nebius: 5 });
    const started = Date.now();
    const sent = await settleOn('nebius', 5, 400);
    expect(sent).toBeGreaterThan(5);
    expect(Date.now() - started).toBeLessThan(30_000);
  }, 60_000);
});
