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
