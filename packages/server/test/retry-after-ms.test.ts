import { type Simulator, startSimulator } from '@gw/simulator';
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';

// Retry-After is in whole seconds, rounded up: a wait of 250 ms said "1", one of 59.9 s said "60". The official
// OpenAI SDK reads retry-after-ms first, then Retry-After.
const OPEN_MS = 250;

let sim: Simulator;
let gw: TestGateway;

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  gw = await startGateway({ sim, env: { GW_CIRCUIT_FAILURES: '1', GW_CIRCUIT_OPEN_MS: String(OPEN_MS), GW_IDEMPOTENCY_WAIT_MS: '150' } });
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await sim?.close();
});
beforeEach(() => resetProviders(sim));

function chat(base: string, key: string, model = 'meta/llama-3.3-70b', headers: Record<string, string> = {}) {
  return fetch(`${base}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'wait for it' }], max_tokens: 5 }),
  });
}

/** The two headers of a refusal: Retry-After is retry-after-ms rounded up to whole seconds, at least 1. */
function waits(res: Response): { s: number; ms: number } {
  const s = Number(res.headers.get('retry-after'));
  const ms = Number(res.headers.get('retry-after-ms'));
  expect(res.headers.get('retry-after-ms')).toMatch(/^\d+$/);
  expect(s).toBe(Math.max(1, Math.ceil(ms / 1000)));
  return { s, ms };
}

describe('retry-after-ms beside Retry-After', () => {
  it('the OpenAI SDK retries after the exact wait of a 503, not after the whole second Retry-After says', async () => {
    const { key } = await gw.createKey({ rateLimitRpm: 1000 });
    // mistral/medium has one offer: its failure opens its circuit for OPEN_MS, and the next request is answered 503.
    sim.providers.mistral?.setFault({ kind: 'status', status: 500, retryAfter: null, times: 1 });
    expect((await chat(gw.baseA, key, 'mistral/medium')).status).toBe(502);
    const seen: { status: number; sentAt: number; answeredAt: number; ms: string | null; s: string | null }[] = [];
    const fetchSeen: typeof fetch = async (input, init) => {
      const sentAt = performance.now();
      const res = await fetch(input, init);
      seen.push({ status: res.status, sentAt, answeredAt: performance.now(), ms: res.headers.get('retry-after-ms'), s: res.headers.get('retry-after') });
      return res;
    };
    const client = new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 1, fetch: fetchSeen });
    const done = await client.chat.completions.create({ model: 'mistral/medium', messages: [{ role: 'user', content: 'again' }] });
    expect(done.choices[0]?.message.content).toBeTruthy();
    expect(seen.map((r) => r.status)).toEqual([503, 200]);
    const [refused, retried] = seen as [(typeof seen)[0], (typeof seen)[0]];
    expect(refused.s).toBe('1');
    expect(Number(refused.ms)).toBeGreaterThan(0);
    expect(Number(refused.ms)).toBeLessThanOrEqual(OPEN_MS);
    // With Retry-After alone the SDK waited 1000 ms.
    expect(retried.sentAt - refused.answeredAt).toBeLessThan(900);
  });

  it('a 503 while the circuit’s probe is in flight says a wait of a second, not retry-after-ms 0 (the SDK retried at once)', async () => {
    const { key } = await gw.createKey({ rateLimitRpm: 1000 });
    sim.providers.mistral?.setFault({ kind: 'status', status: 500, retryAfter: null, times: 1 });
    expect((await chat(gw.baseA, key, 'mistral/medium')).status).toBe(502);
    await new Promise((r) => setTimeout(r, OPEN_MS + 50));
    // The probe: half-open lets it through, and it answers after 600 ms.
    sim.providers.mistral?.setFault({ kind: 'latency', ms: 600, times: 1 });
    const probe = chat(gw.baseA, key, 'mistral/medium');
    await new Promise((r) => setTimeout(r, 100));
    for (const base of [gw.baseA, gw.baseB]) {
      const refused = await chat(base, key, 'mistral/medium');
      expect(refused.status).toBe(base === gw.baseA ? 503 : 502);
      expect(waits(refused)).toEqual({ s: 1, ms: 1000 });
    }
    const seen: number[] = [];
    const fetchSeen: typeof fetch = async (input, init) => {
      const res = await fetch(input, init);
      seen.push(res.status);
      return res;
    };
    const client = new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 1, fetch: fetchSeen });
    const done = await client.chat.completions.create({ model: 'mistral/medium', messages: [{ role: 'user', content: 'after the probe' }] });
    expect(done.choices[0]?.message.content).toBeTruthy();
    expect(seen).toEqual([503, 200]);
    expect((await probe).status).toBe(200);
  });

  it('a 429 of the rate limit says the exact wait in both variants', async () => {
    const { key } = await gw.createKey({ rateLimitRpm: 1 });
    expect((await chat(gw.baseA, key)).status).toBe(200);
    for (const base of [gw.baseA, gw.baseB]) {
      const res = await chat(base, key);
      expect(res.status).toBe(429);
      const { ms } = waits(res);
      expect(ms).toBeGreaterThan(50_000);
      expect(ms).toBeLessThanOrEqual(60_000);
    }
  });

  it('a 409 of a request still running with the same idempotency key, and its constant wait', async () => {
    const { key } = await gw.createKey({ rateLimitRpm: 1000 });
    sim.providers.scaleway?.setFault({ kind: 'latency', ms: 800, times: 1 });
    const first = chat(gw.baseB, key, 'meta/llama-3.3-70b', { 'x-idempotency-key': 'retry-after-ms' });
    await new Promise((r) => setTimeout(r, 100));
    const repeat = await chat(gw.baseB, key, 'meta/llama-3.3-70b', { 'x-idempotency-key': 'retry-after-ms' });
    expect(repeat.status).toBe(409);
    expect(waits(repeat)).toEqual({ s: 1, ms: 1000 });
    expect((await first).status).toBe(200);
  });
});
