import { createServer, type Socket } from 'node:net';
import type { GatewayFileConfig } from '@gw/schema';
import { type Simulator, startSimulator } from '@gw/simulator';
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { UpstreamError } from '../src/errors/upstream-error.js';
import { UpstreamHttp } from '../src/providers/http-client.js';
import { eventually, resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';
import { openAiClients } from './helpers/sdk.js';

const MODEL = 'meta/llama-3.3-70b'; // scaleway, ovh, nebius
const QWEN = 'qwen/qwen3-32b'; // ovh, nebius
const RELAY = 'test/relay'; // seven offers: scaleway and six more providers on the same simulated server
const CLONES = ['s2', 's3', 's4', 's5', 's6', 's7'];

let sim: Simulator;
let gw: TestGateway;
let a: OpenAI;
let b: OpenAI;

/** Nebius answers within 300 ms or times out; a model offered seven times shows where max hops cut the plan. */
function catalogue(c: GatewayFileConfig): GatewayFileConfig {
  const scaleway = c.providers.find((p) => p.id === 'scaleway');
  if (!scaleway) throw new Error('no scaleway in the demo catalogue');
  const pricing = { prompt_per_1m: 0.8, completion_per_1m: 0.95, currency: 'EUR' };
  return {
    providers: [...c.providers.map((p) => (p.id === 'nebius' ? { ...p, timeoutMs: 300 } : p)), ...CLONES.map((id) => ({ ...scaleway, id }))],
    models: [
      ...c.models,
      {
        id: RELAY,
        kind: 'chat',
        owned_by: 'test',
        offers: ['scaleway', ...CLONES].map((provider) => ({ provider, upstreamModel: 'llama-3.3-70b-instruct', pricing })),
      },
    ],
  };
}

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  // Circuits stay closed in this file: it is about one request's walk down its plan. So its 429s and 503s name no
  // wait (the simulator's default Retry-After: 1 would sit their offer out for that second: routing-health.test.ts).
  gw = await startGateway({ sim, catalogue, env: { GW_CIRCUIT_FAILURES: '1000' } });
  const { key } = await gw.createKey({ rateLimitRpm: 10_000 });
  ({ a, b } = openAiClients(gw, key));
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await sim?.close();
});
beforeEach(() => resetProviders(sim));

type ApiError = InstanceType<typeof OpenAI.APIError>;
const chats = (id: string) => sim.providers[id]?.stats().byEndpoint.chat ?? 0;
const messages = [{ role: 'user' as const, content: 'Fail over safely' }];

async function ask(client: OpenAI, headers: Record<string, string>, model = MODEL) {
  const { response } = await client.chat.completions.create({ model, messages }, { headers }).withResponse();
  return { provider: response.headers.get('x-gateway-provider'), hops: response.headers.get('x-gateway-routing-hops') };
}
const fail = (client: OpenAI, headers: Record<string, string>, model = MODEL) =>
  client.chat.completions.create({ model, messages }, { headers }).then(
    () => {
      throw new Error('expected an error');
    },
    (e: unknown) => e as ApiError,
  );

describe('pinning with X-Gateway-Provider', () => {
  it('serves from the pinned provider only, and never fails over', async () => {
    expect(await ask(b, { 'X-Gateway-Provider': 'ovh' })).toEqual({ provider: 'ovh', hops: '0' });
    sim.providers.ovh?.setFault({ kind: 'status', status: 503, retryAfter: null });
    const err = await fail(b, { 'X-Gateway-Provider': 'ovh' });
    expect([err.status, err.code]).toEqual([502, 'upstream_unavailable']);
    expect(chats('scaleway') + chats('nebius')).toBe(0);
  });

  it('variant A knows only configured providers; B refuses a provider that does not host the model', async () => {
    for (const pin of ['nowhere', 'mistral']) {
      const errA = await fail(a, { 'X-Gateway-Provider': pin });
      expect([errA.status, errA.code, errA.param]).toEqual([400, 'validation_error', 'X-Gateway-Provider']);
      const errB = await fail(b, { 'X-Gateway-Provider': pin });
      expect([errB.status, errB.code, errB.param]).toEqual([400, 'provider_unsupported', 'X-Gateway-Provider']);
    }
  });
});

describe('provider statuses that are the provider failing, not the client', () => {
  it('a status routing does not know (405) fails over like a 5xx; pinned to that provider it is a 502, never a 500', async () => {
    sim.providers.ovh?.setFault({ kind: 'status', status: 405 });
    expect(await ask(b, { 'X-Gateway-Provider-Prefer': 'ovh' })).toEqual({ provider: 'scaleway', hops: '1' });
    const errA = await fail(a, { 'X-Gateway-Provider': 'ovh' });
    expect([errA.status, errA.code]).toEqual([502, 'provider_down']);
    const errB = await fail(b, { 'X-Gateway-Provider': 'ovh' });
    expect([errB.status, errB.code]).toEqual([502, 'upstream_unavailable']);
    expect(chats('nebius')).toBe(0);
  });

  it("Scaleway's 422 for a model it no longer serves (between two registry rebuilds) fails over; a 422 about the request does not", async () => {
    sim.providers.scaleway?.setFault({ kind: 'status', status: 422, message: 'Model not found: llama-3.3-70b-instruct' });
    const refused = sim.providers.scaleway?.stats().byStatus['422'] ?? 0;
    expect(await ask(b, { 'X-Gateway-Provider-Prefer': 'scaleway' })).toEqual({ provider: 'ovh', hops: '1' });
    // Counted, not read as the last call: the registry reads the model lists again at once (a model gone upstream).
    expect(sim.providers.scaleway?.stats().byStatus['422']).toBe(refused + 1);
    sim.providers.scaleway?.setFault({ kind: 'status', status: 422, message: 'temperature: Input should be less than or equal to 2' });
    const before = chats('ovh') + chats('nebius');
    const err = await fail(b, { 'X-Gateway-Provider-Prefer': 'scaleway' });
    expect([err.status, err.code]).toEqual([400, 'invalid_request']);
    expect(chats('ovh') + chats('nebius')).toBe(before);
  });
});

describe('a request over one host’s payload limit (413)', () => {
  it('fails over to a host that takes it, for a whole answer and a stream; over every host’s limit it is the client’s 400', async () => {
    // A 2.3 MB image: within the gateway's 4 MB but over OVHcloud's 2 MB JSON payloads.
    const url = `data:image/png;base64,${Buffer.alloc(1_700_000, 7).toString('base64')}`;
    const image = [{ role: 'user' as const, content: [{ type: 'image_url' as const, image_url: { url } }] }];
    const prefer = { headers: { 'X-Gateway-Provider-Prefer': 'ovh' } };
    const { response } = await b.chat.completions.create({ model: 'mistral/small', messages: image }, prefer).withResponse();
    expect([response.headers.get('x-gateway-provider'), response.headers.get('x-gateway-routing-hops')]).toEqual(['scaleway', '1']);
    const stream = await a.chat.completions.create({ model: 'mistral/small', messages: image, stream: true }, prefer);
    for await (const _ of stream);
    expect([sim.providers.ovh?.stats().byStatus['413'], chats('scaleway')]).toEqual([2, 2]);
    // Every host refuses it: the request's own fault, not a provider failing.
    for (const id of ['scaleway', 'mistral']) sim.providers[id]?.setFault({ kind: 'status', status: 413 });
    const err = (await b.chat.completions.create({ model: 'mistral/small', messages: image }, prefer).catch((e: unknown) => e)) as ApiError;
    expect([err.status, err.code, err.message]).toEqual([400, 'invalid_request', expect.stringContaining('answered 413')]);
  });
});

describe('X-Gateway-Provider-Prefer', () => {
  it('puts the preferred provider first and fails over to the rest in order', async () => {
    expect(await ask(b, { 'X-Gateway-Provider-Prefer': 'nebius' })).toEqual({ provider: 'nebius', hops: '0' });
    sim.providers.nebius?.setFault({ kind: 'status', status: 500 });
    expect(await ask(b, { 'X-Gateway-Provider-Prefer': 'nebius' })).toEqual({ provider: 'scaleway', hops: '1' });
    // A known provider that does not host the model is no preference: the strategy's order stands.
    expect(await ask(b, { 'X-Gateway-Provider-Prefer': 'mistral' })).toEqual({ provider: 'scaleway', hops: '0' });
    const err = await fail(b, { 'X-Gateway-Provider-Prefer': 'elsewhere' });
    expect([err.status, err.code, err.param]).toEqual([400, 'invalid_request', 'X-Gateway-Provider-Prefer']);
  });
});

describe('failover and X-Gateway-Max-Hops', () => {
  it('fails over on 5xx, 429, a reset connection and a timeout, counting the hops', async () => {
    for (const fault of [{ kind: 'status', status: 502 }, { kind: 'status', status: 429, retryAfter: null }, { kind: 'reset' }] as const) {
      sim.providers.scaleway?.setFault(fault);
      expect(await ask(b, {}), JSON.stringify(fault)).toEqual({ provider: 'ovh', hops: '1' });
    }
    // nebius times out (300 ms), scaleway answers 503, ovh answers: two hops.
    sim.providers.scaleway?.setFault({ kind: 'status', status: 503, retryAfter: null });
    sim.providers.nebius?.setFault({ kind: 'hang' });
    expect(await ask(b, { 'X-Gateway-Provider-Prefer': 'nebius' })).toEqual({ provider: 'ovh', hops: '2' });
  });

  it('a provider that hangs up is said to have closed the connection, not to be unreachable', async () => {
    sim.providers.scaleway?.setFault({ kind: 'reset' });
    const err = await fail(a, { 'X-Gateway-Provider': 'scaleway' });
    expect([err.status, err.code]).toEqual([502, 'provider_down']);
    expect(err.message).toContain('scaleway closed the connection before its answer was complete');
  });

  it('0 hops: the first offer only', async () => {
    sim.providers.scaleway?.setFault({ kind: 'status', status: 503, retryAfter: null });
    const err = await fail(a, { 'X-Gateway-Max-Hops': '0' });
    expect([err.status, err.code]).toEqual([502, 'provider_down']);
    expect([chats('scaleway'), chats('ovh'), chats('nebius')]).toEqual([1, 0, 0]);
  });

  it('5 hops: six offers at most, and the sixth may answer', async () => {
    sim.providers.scaleway?.setFault({ kind: 'status', status: 503, retryAfter: null });
    const err = await fail(b, { 'X-Gateway-Max-Hops': '5' }, RELAY);
    expect([err.status, err.code]).toEqual([502, 'upstream_unavailable']);
    expect(chats('scaleway')).toBe(6);
    sim.providers.scaleway?.resetStats();
    sim.providers.scaleway?.setFault({ kind: 'status', status: 503, retryAfter: null, times: 5 });
    expect(await ask(b, { 'X-Gateway-Max-Hops': '5' }, RELAY)).toEqual({ provider: 's6', hops: '5' });
    // The default is 2 hops: three offers.
    sim.providers.scaleway?.resetStats();
    sim.providers.scaleway?.setFault({ kind: 'status', status: 503, retryAfter: null });
    await fail(b, {}, RELAY);
    expect(chats('scaleway')).toBe(3);
  });

  it('anything but an integer from 0 to 5 is a 400 in each variant', async () => {
    for (const hops of ['6', '-1', 'two', '1.5', '05']) {
      const errA = await fail(a, { 'X-Gateway-Max-Hops': hops });
      expect([errA.status, errA.code], hops).toEqual([400, 'validation_error']);
      const errB = await fail(b, { 'X-Gateway-Max-Hops': hops });
      expect([errB.status, errB.code], hops).toEqual([400, 'invalid_request']);
    }
    expect(chats('scaleway')).toBe(0);
  });

  it('a routing header sent empty is a 400 naming it, as any other bad value, never its default', async () => {
    const headers = ['X-Gateway-Max-Hops', 'X-Gateway-Strategy', 'X-Gateway-Provider', 'X-Gateway-Provider-Prefer'];
    for (const name of headers) {
      const errA = await fail(a, { [name]: '' });
      expect([errA.status, errA.code, errA.param], name).toEqual([400, 'validation_error', name]);
      const errB = await fail(b, { [name]: '' });
      const code = name === 'X-Gateway-Provider' ? 'provider_unsupported' : 'invalid_request';
      expect([errB.status, errB.code, errB.param], name).toEqual([400, code, name]);
    }
    expect(chats('scaleway') + chats('ovh') + chats('nebius')).toBe(0);
  });

  it('when every offer fails: 502 provider_down (A) / upstream_unavailable (B), with the providers tried', async () => {
    for (const id of ['scaleway', 'ovh', 'nebius']) sim.providers[id]?.setFault({ kind: 'status', status: 500 });
    const errA = await fail(a, {});
    expect([errA.status, errA.code]).toEqual([502, 'provider_down']);
    expect(errA.message).toContain('tried: scaleway, ovh, nebius');
    const errB = await fail(b, {});
    expect([errB.status, errB.code]).toEqual([502, 'upstream_unavailable']);
    // A 500 names no wait, so neither does the answer.
    expect(errB.headers?.get('retry-after')).toBeNull();
  });

  it('when the last offer to fail was an overloaded provider naming its wait (503 Retry-After: 7), the answer passes the wait on', async () => {
    // QWEN (ovh, then nebius), whose offers no other test here uses: the provider that named its wait sits it out.
    sim.providers.ovh?.setFault({ kind: 'status', status: 500 });
    sim.providers.nebius?.setFault({ kind: 'status', status: 503, retryAfter: 7 });
    const errA = await fail(a, {}, QWEN);
    expect([errA.status, errA.headers?.get('retry-after')]).toEqual([502, '7']);
    // Nebius is left out now, so ovh is the last offer.
    sim.providers.ovh?.setFault({ kind: 'status', status: 503, retryAfter: 7 });
    const errB = await fail(b, {}, QWEN);
    expect([errB.status, errB.headers?.get('retry-after')]).toEqual([502, '7']);
    expect([chats('ovh'), chats('nebius')]).toEqual([2, 1]);
  });
});

describe('timeouts', () => {
  it('an upstream that does not answer within its timeoutMs is a 504, and the upstream request is aborted', async () => {
    sim.providers.nebius?.setFault({ kind: 'hang' });
    for (const client of [a, b]) {
      const started = Date.now();
      const err = await fail(client, { 'X-Gateway-Provider': 'nebius' });
      expect([err.status, err.code]).toEqual([504, 'upstream_timeout']);
      expect(Date.now() - started).toBeLessThan(2000);
    }
    expect(chats('nebius')).toBe(2);
    // The gateway closed its side: the simulator sees no request left in flight.
    await eventually(() => expect(sim.providers.nebius?.stats().inFlight).toBe(0));
  });

  it('a client that leaves before a non-streamed answer ends the upstream request too', async () => {
    sim.providers.scaleway?.setFault({ kind: 'hang' });
    const leave = new AbortController();
    const pending = a.chat.completions.create({ model: MODEL, messages }, { headers: { 'X-Gateway-Provider': 'scaleway' }, signal: leave.signal });
    await eventually(() => expect(sim.providers.scaleway?.stats().inFlight).toBe(1));
    leave.abort();
    await expect(pending).rejects.toThrow(/abort/i);
    // Far below scaleway's own timeout: the gateway dropped the upstream request when its client went away.
    await eventually(() => expect(sim.providers.scaleway?.stats().inFlight).toBe(0));
  });

  it('a stream that stalls mid-way ends with an error event and its upstream request is aborted; no failover after the first byte', async () => {
    sim.providers.nebius?.setFault({ kind: 'hang', afterChunks: 3 });
    const stream = await b.chat.completions.create({ model: MODEL, messages, stream: true }, { headers: { 'X-Gateway-Provider-Prefer': 'nebius' } });
    let chunks = 0;
    const err = await (async () => {
      for await (const _ of stream) chunks++;
    })().catch((e: unknown) => e);
    expect(chunks).toBeGreaterThan(0);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect((err as InstanceType<typeof OpenAI.APIError>).code).toBe('upstream_timeout');
    expect(chats('scaleway') + chats('ovh')).toBe(0);
    await eventually(() => expect(sim.providers.nebius?.stats().inFlight).toBe(0));
  });

  it('a reset after the first chunks is not failed over either', async () => {
    // Chunks spaced out, so the first ones reach the client before the reset (a reset right behind them would discard them unread).
    sim.providers.scaleway?.configure({ chunkGapMs: 30 });
    try {
      sim.providers.scaleway?.setFault({ kind: 'reset', afterChunks: 3 });
      const stream = await a.chat.completions.create({ model: MODEL, messages, stream: true });
      let chunks = 0;
      const err = await (async () => {
        for await (const _ of stream) chunks++;
      })().catch((e: unknown) => e);
      expect(chunks).toBeGreaterThan(0);
      expect(err).toBeInstanceOf(OpenAI.APIError);
      expect(chats('ovh') + chats('nebius')).toBe(0);
    } finally {
      sim.providers.scaleway?.configure({ chunkGapMs: 0 });
    }
  });

  it('connectTimeoutMs bounds the connection apart from the read timeout, and closes the attempt', async () => {
    // A server that accepts TCP but never answers the TLS handshake: only the connect timeout can end the wait.
    const sockets: Socket[] = [];
    let closed = 0;
    const tarpit = createServer((s) => {
      sockets.push(s);
      s.resume();
      s.on('close', () => closed++);
    });
    await new Promise<void>((r) => tarpit.listen(0, '127.0.0.1', r));
    const port = (tarpit.address() as { port: number }).port;
    const http = new UpstreamHttp('tarpit', `https://127.0.0.1:${port}`, 30_000, 300);
    try {
      const started = Date.now();
      const err = await http.json({ method: 'GET', path: '/v1/models', headers: {} }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(UpstreamError);
      expect((err as UpstreamError).kind).toBe('timeout');
      expect((err as UpstreamError).message).toContain('no connection to tarpit within 300 ms');
      // undici checks connect timers about once a second; far below the 30 s read timeout either way.
      expect(Date.now() - started).toBeLessThan(3000);
      await eventually(() => expect(closed).toBe(1));
    } finally {
      await http.close();
      for (const s of sockets) s.destroy();
      tarpit.close();
    }
  });
});
