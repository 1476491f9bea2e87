import { type Simulator, startSimulator } from '@gw/simulator';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { eventually, resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';

// A half-open circuit's probe whose client leaves before its answer: the slot goes to the next request, and only the
// probe's own end frees it.
const MODEL = 'meta/llama-3.3-70b';
const OPEN_MS = 500;
let sim: Simulator;
let gw: TestGateway;
let key: string;

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  gw = await startGateway({ sim, env: { GW_CIRCUIT_FAILURES: '1', GW_CIRCUIT_OPEN_MS: String(OPEN_MS) } });
  key = (await gw.createKey({ rateLimitRpm: 10_000 })).key;
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await sim?.close();
});
beforeEach(() => resetProviders(sim));

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const scaleway = () => sim.providers.scaleway?.stats().byEndpoint.chat ?? 0;
const inFlight = () => sim.providers.scaleway?.stats().inFlight ?? 0;

/** A chat request pinned to scaleway (a pinned request with its circuit out gets the 503, no failover). */
function chat(stream: boolean, signal?: AbortSignal): Promise<Response> {
  return fetch(`${gw.baseA}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-gateway-provider': 'scaleway' },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], stream }),
    ...(signal ? { signal } : {}),
  });
}

/** Sends a request and leaves once scaleway holds it (before any answer). */
async function leaving(stream: boolean): Promise<() => Promise<void>> {
  const controller = new AbortController();
  const sent = chat(stream, controller.signal).catch(() => null);
  const held = inFlight();
  await eventually(() => expect(inFlight()).toBeGreaterThan(held));
  return async () => {
    controller.abort();
    await sent;
  };
}

/** One failure opens scaleway's circuit; after OPEN_MS it is half-open. */
async function halfOpen(): Promise<void> {
  sim.providers.scaleway?.setFault({ kind: 'status', status: 500, times: 1 });
  expect((await chat(false)).status).toBe(502);
  expect((await chat(false)).status).toBe(503);
  await sleep(OPEN_MS + 50);
}

describe('a half-open circuit’s probe', () => {
  for (const stream of [false, true]) {
    it(`whose client leaves before its answer frees the slot for the next request (stream: ${stream})`, async () => {
      await halfOpen();
      sim.providers.scaleway?.setFault({ kind: 'hang', times: 1 });
      const leave = await leaving(stream);
      // The probe holds the slot: a pinned request is told the provider is down, and scaleway is not asked.
      const calls = scaleway();
      expect((await chat(stream)).status).toBe(503);
      expect(scaleway()).toBe(calls);
      await leave();
      await eventually(async () => {
        const res = await chat(stream);
        await res.text();
        expect(res.status).toBe(200);
      });
    });
  }

  it('keeps its slot when another attempt, begun before the circuit opened, is left by its client', async () => {
    // An attempt in flight while the circuit is closed.
    sim.providers.scaleway?.setFault({ kind: 'hang', times: 1 });
    const leaveEarlier = await leaving(false);
    await halfOpen();
    sim.providers.scaleway?.setFault({ kind: 'latency', ms: 1500, times: 1 });
    const probe = chat(false);
    await eventually(() => expect(inFlight()).toBe(2));
    await leaveEarlier();
    // Its upstream call stopped (and its end was told to the circuit) before the next request.
    await eventually(() => expect(inFlight()).toBe(1));
    await sleep(50);
    // The probe is still in flight: the next request is not a second probe.
    const calls = scaleway();
    const next = await chat(false);
    expect([next.status, scaleway()]).toEqual([503, calls]);
    expect((await probe).status).toBe(200);
    expect((await chat(false)).status).toBe(200);
  });
});
