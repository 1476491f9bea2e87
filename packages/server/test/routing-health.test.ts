import type { GatewayFileConfig } from '@gw/schema';
import { type Simulator, startSimulator } from '@gw/simulator';
import { type RedisServer, startRedis } from '@gw/testkit';
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { eventually, resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';

const MODEL = 'meta/llama-3.3-70b'; // scaleway, ovh, nebius
const QWEN = 'qwen/qwen3-32b'; // ovh, nebius
const OPEN_MS = 700;

let sim: Simulator;
let redis: RedisServer;
let solo: TestGateway;
let one: TestGateway;
let two: TestGateway;
let three: TestGateway;
const clients = new Map<TestGateway, { a: OpenAI; b: OpenAI }>();

const shortNebius = (c: GatewayFileConfig): GatewayFileConfig => ({
  ...c,
  providers: c.providers.map((p) => (p.id === 'nebius' ? { ...p, timeoutMs: 300 } : p)),
});

async function gateway(env: Record<string, string>, redisUrl?: string): Promise<TestGateway> {
  const gw = await startGateway({ sim, catalogue: shortNebius, env: { GW_CIRCUIT_FAILURES: '3', ...env }, ...(redisUrl ? { redisUrl } : {}) });
  const { key } = await gw.createKey({ rateLimitRpm: 10_000 });
  clients.set(gw, { a: new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 0 }), b: new OpenAI({ apiKey: key, baseURL: gw.baseB, maxRetries: 0 }) });
  return gw;
}

beforeAll(async () => {
  [sim, redis] = await Promise.all([startSimulator({ latencyScale: 0 }), startRedis()]);
  solo = await gateway({ GW_CIRCUIT_OPEN_MS: String(OPEN_MS) });
  // Two instances sharing Redis: one re-probes quickly, the other would keep a circuit open for a minute on its own.
  one = await gateway({ GW_CIRCUIT_OPEN_MS: String(OPEN_MS) }, redis.url);
  two = await gateway({ GW_CIRCUIT_OPEN_MS: '60000' }, redis.url);
  // And one without Redis, which learns nothing from them.
  three = await gateway({ GW_CIRCUIT_OPEN_MS: '60000' });
}, 90_000);
afterAll(async () => {
  await Promise.all([solo, one, two, three].map((g) => g?.close()));
  await sim?.close();
  await redis?.stop();
});
beforeEach(() => resetProviders(sim));

const chats = (id: string) => sim.providers[id]?.stats().byEndpoint.chat ?? 0;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function ask(gw: TestGateway, model = MODEL) {
  const { b } = clients.get(gw) as { b: OpenAI };
  const { response } = await b.chat.completions.create({ model, messages: [{ role: 'user', content: 'Are you healthy?' }] }).withResponse();
  return { provider: response.headers.get('x-gateway-provider'), hops: response.headers.get('x-gateway-routing-hops') };
}

async function failing(gw: TestGateway, variant: 'a' | 'b', model: string, headers: Record<string, string> = {}, maxTokens?: number) {
  const client = (clients.get(gw) as { a: OpenAI; b: OpenAI })[variant];
  const cap = maxTokens === undefined ? {} : { max_tokens: maxTokens };
  const res = client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], ...cap }, { headers });
  return (await res.catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
}

/** What an instance believes of scaleway's offer of MODEL. */
const scalewayCircuit = (gw: TestGateway) => {
  const offer = gw.gateway.services.registry.get(MODEL)?.offers.find((o) => o.provider === 'scaleway');
  if (!offer) throw new Error('scaleway does not offer the model');
  return gw.gateway.services.offerStats.circuit(offer);
};

describe('circuits per offer', () => {
  it('three failures in a row open the circuit: the offer is skipped, then one probe closes it again', async () => {
    sim.providers.scaleway?.setFault({ kind: 'status', status: 503, retryAfter: null });
    for (let i = 0; i < 3; i++) expect(await ask(solo)).toEqual({ provider: 'ovh', hops: '1' });
    // Open: scaleway is left out of the plan, so no hop is spent on it.
    expect(await ask(solo)).toEqual({ provider: 'ovh', hops: '0' });
    expect(chats('scaleway')).toBe(3);
    sim.providers.scaleway?.clearFaults();
    expect((await ask(solo)).provider).toBe('ovh');
    await sleep(OPEN_MS + 50);
    // Half-open: the next request probes scaleway; its answer closes the circuit.
    expect(await ask(solo)).toEqual({ provider: 'scaleway', hops: '0' });
    expect(await ask(solo)).toEqual({ provider: 'scaleway', hops: '0' });
  });

  it('a failed probe opens the circuit again for another period', async () => {
    sim.providers.scaleway?.setFault({ kind: 'status', status: 500 });
    for (let i = 0; i < 3; i++) await ask(solo);
    await sleep(OPEN_MS + 50);
    sim.providers.scaleway?.resetStats();
    expect(await ask(solo)).toEqual({ provider: 'ovh', hops: '1' });
    expect(chats('scaleway')).toBe(1);
    expect(await ask(solo)).toEqual({ provider: 'ovh', hops: '0' });
    expect(chats('scaleway')).toBe(1);
    sim.providers.scaleway?.clearFaults();
    await sleep(OPEN_MS + 50);
    expect((await ask(solo)).provider).toBe('scaleway');
  });

  it('timeouts count too; with no healthy offer left to begin with: 503 with Retry-After, no upstream call', async () => {
    sim.providers.ovh?.setFault({ kind: 'status', status: 500 });
    sim.providers.nebius?.setFault({ kind: 'hang' });
    for (let i = 0; i < 3; i++) {
      // nebius first (it times out), then ovh (500): both circuits open at the end of the third walk. A cap nebius
      // generates well within its 300 ms at 20 tokens/s: a longer one's timeout would not count (docs/routing.md).
      const err = await failing(solo, 'b', QWEN, { 'X-Gateway-Provider-Prefer': 'nebius' }, 5);
      expect([err.status, err.code]).toEqual([502, 'upstream_unavailable']);
    }
    sim.providers.ovh?.resetStats();
    sim.providers.nebius?.resetStats();
    const errA = await failing(solo, 'a', QWEN);
    expect([errA.status, errA.code]).toEqual([503, 'provider_down']);
    expect(Number(errA.headers?.get('retry-after'))).toBeGreaterThanOrEqual(1);
    const errB = await failing(solo, 'b', QWEN);
    // B's table has one row for providers that cannot answer: 502 upstream_unavailable.
    expect([errB.status, errB.code]).toEqual([502, 'upstream_unavailable']);
    expect(Number(errB.headers?.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(chats('ovh') + chats('nebius')).toBe(0);
    sim.providers.ovh?.clearFaults();
    sim.providers.nebius?.clearFaults();
    await sleep(OPEN_MS + 50);
    expect((await ask(solo, QWEN)).provider).toBe('ovh');
  });
});

describe('instances sharing Redis learn from each other', () => {
  it('a circuit opened on one instance is open on the other; its recovery reaches the other too; without Redis nothing is shared', async () => {
    sim.providers.scaleway?.setFault({ kind: 'status', status: 503, retryAfter: null });
    for (let i = 0; i < 3; i++) expect((await ask(one)).hops).toBe('1');
    expect(chats('scaleway')).toBe(3);
    // Instance two never called scaleway, yet skips it once one's observations arrive (batched every 50 ms).
    await eventually(() => expect(scalewayCircuit(two)).toBe('open'));
    expect(await ask(two)).toEqual({ provider: 'ovh', hops: '0' });
    expect(chats('scaleway')).toBe(3);
    expect(scalewayCircuit(three)).toBe('closed');
    // Instance three, without Redis, still tries it.
    expect(await ask(three)).toEqual({ provider: 'ovh', hops: '1' });
    expect(chats('scaleway')).toBe(4);
    sim.providers.scaleway?.clearFaults();
    await sleep(OPEN_MS + 50);
    // One's probe succeeds; two closes its circuit from that, long before its own minute is up.
    expect((await ask(one)).provider).toBe('scaleway');
    await eventually(() => expect(scalewayCircuit(two)).toBe('closed'));
    expect((await ask(two)).provider).toBe('scaleway');
  });
});

describe('a provider that names its wait (429 or 503 with Retry-After)', () => {
  const SMALL = 'mistral/small'; // scaleway, ovh, mistral

  it('a 429 without Retry-After only counts; with Retry-After: 1 the offer sits out that second, pinned requests are told so, then it serves again', async () => {
    sim.providers.scaleway?.setFault({ kind: 'status', status: 429, retryAfter: null, times: 2 });
    for (let i = 0; i < 2; i++) expect(await ask(solo)).toEqual({ provider: 'ovh', hops: '1' });
    expect(scalewayCircuit(solo)).toBe('closed');
    expect(await ask(solo)).toEqual({ provider: 'scaleway', hops: '0' });

    sim.providers.scaleway?.setFault({ kind: 'status', status: 429, retryAfter: 1, times: 1 });
    expect(await ask(solo)).toEqual({ provider: 'ovh', hops: '1' });
    // Out at once, for the provider's second rather than after three failures: no hop is spent on it.
    expect(await ask(solo)).toEqual({ provider: 'ovh', hops: '0' });
    for (const variant of ['a', 'b'] as const) {
      const err = await failing(solo, variant, MODEL, { 'X-Gateway-Provider': 'scaleway' });
      expect([err.status, err.code]).toEqual(variant === 'a' ? [503, 'provider_down'] : [502, 'upstream_unavailable']);
      expect(err.headers?.get('retry-after')).toBe('1');
    }
    expect(chats('scaleway')).toBe(4);
    await sleep(1050);
    expect(await ask(solo)).toEqual({ provider: 'scaleway', hops: '0' });
    expect(scalewayCircuit(solo)).toBe('closed');
  });

  it('a wait far ahead (503 with an HTTP date a day away) keeps the offer out for 60 s at most', async () => {
    const tomorrow = new Date(Date.now() + 86_400_000).toUTCString();
    sim.providers.mistral?.setFault({ kind: 'status', status: 503, retryAfter: tomorrow, model: 'mistral-small-latest' });
    // The client is told the provider's wait (at most an hour); the offer sits out a minute, then a probe asks again.
    const first = await failing(solo, 'a', SMALL, { 'X-Gateway-Provider': 'mistral' });
    expect([first.status, Number(first.headers?.get('retry-after'))]).toEqual([502, 3600]);
    const err = await failing(solo, 'a', SMALL, { 'X-Gateway-Provider': 'mistral' });
    expect([err.status, err.code]).toEqual([503, 'provider_down']);
    expect(Number(err.headers?.get('retry-after'))).toBeGreaterThanOrEqual(59);
    expect(Number(err.headers?.get('retry-after'))).toBeLessThanOrEqual(60);
    expect((await ask(solo, SMALL)).provider).toBe('scaleway');
    expect(sim.providers.mistral?.stats().byEndpoint.chat).toBe(1);
  });

  it('a probe answered with a named wait keeps the offer out for that wait, not for the open period', async () => {
    // Instance three opens circuits for a minute; the provider asks for one second, twice.
    sim.providers.scaleway?.setFault({ kind: 'status', status: 429, retryAfter: 1, times: 1 });
    expect(await ask(three)).toEqual({ provider: 'ovh', hops: '1' });
    await sleep(1050);
    expect(scalewayCircuit(three)).toBe('half_open');
    sim.providers.scaleway?.setFault({ kind: 'status', status: 503, retryAfter: 1, times: 1 });
    expect(await ask(three)).toEqual({ provider: 'ovh', hops: '1' });
    expect(scalewayCircuit(three)).toBe('open');
    expect(await ask(three)).toEqual({ provider: 'ovh', hops: '0' });
    expect(chats('scaleway')).toBe(2);
    await sleep(1050);
    expect(await ask(three)).toEqual({ provider: 'scaleway', hops: '0' });
    expect(scalewayCircuit(three)).toBe('closed');
  });

  it("one instance's wait is the other's over Redis, for the provider's time rather than the other's open period", async () => {
    sim.providers.scaleway?.setFault({ kind: 'status', status: 429, retryAfter: 1, times: 1 });
    expect(await ask(one)).toEqual({ provider: 'ovh', hops: '1' });
    await eventually(() => expect(scalewayCircuit(two)).toBe('open'));
    expect(await ask(two)).toEqual({ provider: 'ovh', hops: '0' });
    expect(chats('scaleway')).toBe(1);
    await sleep(1050);
    // Two opens circuits for a minute on its own, yet tries scaleway again once its one second is over.
    expect(await ask(two)).toEqual({ provider: 'scaleway', hops: '0' });
    await eventually(() => expect(scalewayCircuit(one)).toBe('closed'));
  });
});
