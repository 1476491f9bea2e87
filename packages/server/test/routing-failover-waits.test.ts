import { type Simulator, startSimulator } from '@gw/simulator';
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { eventually, resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';

// A request's plan is made when it starts; a provider may ask to be left alone (or fail into an open circuit) while
// the request is still at an earlier offer. Its failover then skips that offer, as a plan made now would.
const MODEL = 'meta/llama-3.3-70b'; // scaleway, ovh, nebius in the configured order

let sim: Simulator;
let gw: TestGateway;
let clients: { a: OpenAI; b: OpenAI };

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  gw = await startGateway({ sim });
  const { key } = await gw.createKey({ rateLimitRpm: 10_000 });
  clients = { a: new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 0 }), b: new OpenAI({ apiKey: key, baseURL: gw.baseB, maxRetries: 0 }) };
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await sim?.close();
});
beforeEach(() => resetProviders(sim));

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const chats = (id: string) => sim.providers[id]?.stats().byEndpoint.chat ?? 0;

describe('failover to an offer that left the plans after the request planned it', () => {
  it.each(['a', 'b'] as const)('variant %s: an offer whose provider asked to wait meanwhile is not asked again; the next one serves', async (variant) => {
    const scaleway = sim.providers.scaleway;
    const ovh = sim.providers.ovh;
    if (!scaleway || !ovh) throw new Error('demo providers missing');
    // Scaleway fails slowly: the request is still there when OVHcloud asks every client to wait.
    scaleway.configure({ latencyMs: 600 });
    scaleway.setFault({ kind: 'status', status: 500, times: 1 });
    try {
      const slow = clients[variant].chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hello' }], max_tokens: 5 }).withResponse();
      await eventually(() => expect(scaleway.stats().inFlight).toBe(1));

      ovh.setFault({ kind: 'status', status: 429, retryAfter: 2 });
      const pinned = await clients[variant].chat.completions
        .create({ model: MODEL, messages: [{ role: 'user', content: 'hello' }], max_tokens: 5 }, { headers: { 'X-Gateway-Provider': 'ovh' } })
        .catch((e: unknown) => e as InstanceType<typeof OpenAI.APIError>);
      expect(pinned).toBeInstanceOf(OpenAI.APIError);
      expect((pinned as InstanceType<typeof OpenAI.APIError>).headers?.get('retry-after')).toBe('2');
      expect(chats('ovh')).toBe(1);

      const { response } = await slow;
      expect(response.headers.get('x-gateway-provider')).toBe('nebius');
      // Two attempts (scaleway, nebius): one hop; OVHcloud was not asked during its wait.
      if (variant === 'b') expect(response.headers.get('x-gateway-routing-hops')).toBe('1');
      expect(chats('ovh')).toBe(1);
      expect(chats('scaleway')).toBe(1);
    } finally {
      scaleway.configure({ latencyMs: 0 });
      ovh.clearFaults();
      // The next case starts once OVHcloud's wait is over (its next request is the probe).
      await sleep(2_050);
    }
  });
});

describe('an offer skipped on the way spends no hop', () => {
  it.each(['a', 'b'] as const)('variant %s: with X-Gateway-Max-Hops: 1, the offer after a skipped one is tried in its place', async (variant) => {
    const scaleway = sim.providers.scaleway;
    const ovh = sim.providers.ovh;
    if (!scaleway || !ovh) throw new Error('demo providers missing');
    scaleway.configure({ latencyMs: 600 });
    scaleway.setFault({ kind: 'status', status: 500, times: 1 });
    try {
      // One failover allowed: Scaleway, then OVHcloud; Nebius is third.
      const slow = clients[variant].chat.completions
        .create({ model: MODEL, messages: [{ role: 'user', content: 'hello' }], max_tokens: 5 }, { headers: { 'X-Gateway-Max-Hops': '1' } })
        .withResponse();
      await eventually(() => expect(scaleway.stats().inFlight).toBe(1));
      ovh.setFault({ kind: 'status', status: 429, retryAfter: 2, times: 1 });
      const pinned = await clients[variant].chat.completions
        .create({ model: MODEL, messages: [{ role: 'user', content: 'hello' }], max_tokens: 5 }, { headers: { 'X-Gateway-Provider': 'ovh' } })
        .catch((e: unknown) => e);
      expect(pinned).toBeInstanceOf(OpenAI.APIError);

      // OVHcloud left the plans and was skipped, no hop spent: the one failover went to Nebius, which answered
      // (it was a 502 naming Scaleway alone, with a healthy Nebius never asked).
      const { response } = await slow;
      expect(response.headers.get('x-gateway-provider')).toBe('nebius');
      if (variant === 'b') expect(response.headers.get('x-gateway-routing-hops')).toBe('1');
      expect(chats('scaleway')).toBe(1);
      expect(chats('ovh')).toBe(1);
      expect(chats('nebius')).toBe(1);
    } finally {
      scaleway.configure({ latencyMs: 0 });
      ovh.clearFaults();
      await sleep(2_050);
    }
  });

  it('the offer in the place of a skipped one is not tried when the budget hold does not cover it', async () => {
    const scaleway = sim.providers.scaleway;
    const ovh = sim.providers.ovh;
    if (!scaleway || !ovh) throw new Error('demo providers missing');
    scaleway.configure({ latencyMs: 600 });
    scaleway.setFault({ kind: 'status', status: 500, times: 1 });
    const { key } = await gw.createKey({ rateLimitRpm: 10_000, budget: 100 });
    const budgeted = new OpenAI({ apiKey: key, baseURL: gw.baseB, maxRetries: 0 });
    try {
      // Without max_tokens the hold is the window at the completion price: 0.95 (Scaleway) and 0.67 (OVHcloud) held,
      // Nebius's 1.20 not. So the request ends with Scaleway's failure, and Nebius is not asked.
      const slow = budgeted.chat.completions
        .create({ model: MODEL, messages: [{ role: 'user', content: 'hello' }] }, { headers: { 'X-Gateway-Max-Hops': '1' } })
        .then(
          () => null,
          (e: unknown) => e,
        );
      await eventually(() => expect(scaleway.stats().inFlight).toBe(1));
      ovh.setFault({ kind: 'status', status: 429, retryAfter: 2, times: 1 });
      await clients.b.chat.completions
        .create({ model: MODEL, messages: [{ role: 'user', content: 'hello' }], max_tokens: 5 }, { headers: { 'X-Gateway-Provider': 'ovh' } })
        .catch(() => null);
      const err = await slow;
      expect(err).toBeInstanceOf(OpenAI.APIError);
      expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(502);
      expect(chats('nebius')).toBe(0);
    } finally {
      scaleway.configure({ latencyMs: 0 });
      ovh.clearFaults();
      await sleep(2_050);
    }
  });
});

describe('a failover that skipped every offer it had left says when the first is back', () => {
  async function gatewayWith(env: Record<string, string> = {}) {
    const gateway = await startGateway({ sim, env });
    return { gateway, key: (await gateway.createKey({ rateLimitRpm: 10_000 })).key };
  }

  /** Scaleway fails slowly (`fault`); meanwhile OVHcloud asks for 20 s and Nebius for `nebiusWaitS` (pinned requests). */
  async function failWhileOthersWait(
    gateway: TestGateway,
    key: string,
    client: OpenAI,
    fault: { status: number; retryAfter: number | null },
    nebiusWaitS: number,
  ) {
    const scaleway = sim.providers.scaleway;
    const ovh = sim.providers.ovh;
    const nebius = sim.providers.nebius;
    if (!scaleway || !ovh || !nebius) throw new Error('demo providers missing');
    scaleway.configure({ latencyMs: 600 });
    scaleway.setFault({ kind: 'status', ...fault, times: 1 });
    // Settled at once into its outcome, so that its failure is not unhandled while the pinned requests run.
    const slow = client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hello' }], max_tokens: 5 }).then(
      (answer) => ({ answer, error: null, at: performance.now() }),
      (error: unknown) => ({ answer: null, error, at: performance.now() }),
    );
    await eventually(() => expect(scaleway.stats().inFlight).toBe(1));
    ovh.setFault({ kind: 'status', status: 429, retryAfter: 20, times: 1 });
    nebius.setFault({ kind: 'status', status: 429, retryAfter: nebiusWaitS, times: 1 });
    const pinned = new OpenAI({ apiKey: key, baseURL: gateway.baseA, maxRetries: 0 });
    for (const provider of ['ovh', 'nebius']) {
      const refused = await pinned.chat.completions
        .create({ model: MODEL, messages: [{ role: 'user', content: 'hello' }], max_tokens: 5 }, { headers: { 'X-Gateway-Provider': provider } })
        .catch((e: unknown) => e);
      // The provider's 429 passed on: a 502 with its wait.
      expect((refused as InstanceType<typeof OpenAI.APIError>).status).toBe(502);
    }
    scaleway.configure({ latencyMs: 0 });
    return slow;
  }

  it.each(['a', 'b'] as const)(
    'variant %s: a last error without a wait gets the soonest of the offers out of the plans',
    async (variant) => {
      // Circuits open at one failure: Scaleway's 500 takes it out too (30 s), as the 429s take OVHcloud (20 s) and
      // Nebius (5 s, the wait it named, though its failure reaches the count) out.
      const { gateway, key } = await gatewayWith({ GW_CIRCUIT_FAILURES: '1' });
      try {
        const client = new OpenAI({ apiKey: key, baseURL: variant === 'a' ? gateway.baseA : gateway.baseB, maxRetries: 0 });
        const { error } = await failWhileOthersWait(gateway, key, client, { status: 500, retryAfter: null }, 5);
        expect(error).toBeInstanceOf(OpenAI.InternalServerError);
        const err = error as InstanceType<typeof OpenAI.APIError>;
        expect(err.status).toBe(502);
        // Every offer is out (each failure opened its circuit), Nebius the shortest: a retry before its 5 s finds none.
        const ms = Number(err.headers?.get('retry-after-ms'));
        expect(ms).toBeGreaterThan(2_500);
        expect(ms).toBeLessThanOrEqual(5_000);
        expect(err.headers?.get('retry-after')).toBe(String(Math.ceil(ms / 1000)));
        expect(chats('ovh')).toBe(1);
        expect(chats('nebius')).toBe(1);
      } finally {
        await gateway.close();
      }
    },
    20_000,
  );

  it.each(['a', 'b'] as const)(
    'variant %s: an offer already out when the request planned, the others failing into open circuits: the 502 says when the first is back',
    async (variant) => {
      const { gateway, key } = await gatewayWith({ GW_CIRCUIT_FAILURES: '1', GW_CIRCUIT_OPEN_MS: '4000' });
      try {
        const client = new OpenAI({ apiKey: key, baseURL: variant === 'a' ? gateway.baseA : gateway.baseB, maxRetries: 0 });
        const ask = () => client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hello' }], max_tokens: 5 });
        // Scaleway fails once and is out for 4 s; OVHcloud serves.
        sim.providers.scaleway?.setFault({ kind: 'status', status: 500, times: 1 });
        await ask();
        await sleep(1_000);
        // Planned without Scaleway; OVHcloud and Nebius fail, and their circuits open too (4 s each).
        sim.providers.ovh?.setFault({ kind: 'status', status: 500, times: 1 });
        sim.providers.nebius?.setFault({ kind: 'status', status: 500, times: 1 });
        const error = (await ask().catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
        expect(error.status).toBe(502);
        // Every offer is out: Scaleway, out first, is back first, in about 3 s. Without it the SDK retried at once into a 503.
        const ms = Number(error.headers?.get('retry-after-ms'));
        expect(ms).toBeGreaterThan(1_500);
        expect(ms).toBeLessThanOrEqual(3_100);
        expect(error.headers?.get('retry-after')).toBe(String(Math.ceil(ms / 1000)));
      } finally {
        await gateway.close();
      }
    },
    20_000,
  );

  it('a pinned request that fails says when its own provider is back, not another', async () => {
    const { gateway, key } = await gatewayWith({ GW_CIRCUIT_FAILURES: '1', GW_CIRCUIT_OPEN_MS: '4000' });
    try {
      const client = new OpenAI({ apiKey: key, baseURL: gateway.baseA, maxRetries: 0 });
      const ask = (provider?: string) =>
        client.chat.completions
          .create(
            { model: MODEL, messages: [{ role: 'user', content: 'hello' }], max_tokens: 5 },
            provider ? { headers: { 'X-Gateway-Provider': provider } } : {},
          )
          .catch((e: unknown) => e as InstanceType<typeof OpenAI.APIError>);
      // Scaleway and OVHcloud out for 4 s; a second later the pinned Nebius fails and is out for 4 s from then.
      sim.providers.scaleway?.setFault({ kind: 'status', status: 500, times: 1 });
      sim.providers.ovh?.setFault({ kind: 'status', status: 500, times: 1 });
      await ask();
      await sleep(1_000);
      sim.providers.nebius?.setFault({ kind: 'status', status: 500, times: 1 });
      const error = (await ask('nebius')) as InstanceType<typeof OpenAI.APIError>;
      expect(error.status).toBe(502);
      expect(Number(error.headers?.get('retry-after-ms'))).toBeGreaterThan(3_500);
    } finally {
      await gateway.close();
    }
  }, 20_000);

  it('a last provider’s own wait gives way to a skipped offer back sooner; the OpenAI SDK’s retry is served by it then', async () => {
    const { gateway, key } = await gatewayWith();
    try {
      // Scaleway asks for 10 s, Nebius for 2 s: the one retry waits 2 s (not 10) and Nebius serves it.
      const client = new OpenAI({ apiKey: key, baseURL: gateway.baseA, maxRetries: 1 });
      const started = performance.now();
      const { answer, error, at } = await failWhileOthersWait(gateway, key, client, { status: 429, retryAfter: 10 }, 2);
      expect(error).toBeNull();
      expect(answer?.choices[0]?.message.content).toBeTruthy();
      // The first attempt's 600 ms, then about 2 s (Scaleway's 10 s would have had the SDK wait that long).
      expect(at - started).toBeLessThan(6_000);
      expect(chats('scaleway')).toBe(1);
      expect(chats('nebius')).toBe(2);
      expect(chats('ovh')).toBe(1);
    } finally {
      await gateway.close();
    }
  }, 20_000);
});
