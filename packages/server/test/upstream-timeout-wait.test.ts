import { type Simulator, startSimulator } from '@gw/simulator';
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';

// A timeout that opens the circuit of a model's only offer: SPEC tells clients to retry a 504. Without a wait, the
// OpenAI SDK's own backoff (about 0.5 s) sent its retry into the open circuit's 503, and gave up there.
const OPEN_MS = 1500;
const MODEL = 'mistral/medium'; // mistral's alone

let sim: Simulator;
let gw: TestGateway;

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  gw = await startGateway({
    sim,
    env: { GW_CIRCUIT_FAILURES: '1', GW_CIRCUIT_OPEN_MS: String(OPEN_MS) },
    catalogue: (c) => {
      for (const p of c.providers) if (p.id === 'mistral') (p as { timeoutMs?: number }).timeoutMs = 300;
      return c;
    },
  });
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await sim?.close();
});
beforeEach(async () => {
  resetProviders(sim);
  // The circuit opened by the test before is let through again.
  await new Promise((r) => setTimeout(r, OPEN_MS + 100));
});

describe('a 504 whose timeout left every offer of the model out', () => {
  it.each([
    ['A', () => gw.baseA],
    ['B', () => gw.baseB],
  ])('variant %s says when the first is back, and the OpenAI SDK retries then, not into the 503', async (_v, base) => {
    const { key } = await gw.createKey({ rateLimitRpm: 1000 });
    sim.providers.mistral?.setFault({ kind: 'hang', times: 1 });
    const seen: { status: number; sentAt: number; answeredAt: number; ms: string | null; s: string | null }[] = [];
    const fetchSeen: typeof fetch = async (input, init) => {
      const sentAt = performance.now();
      const res = await fetch(input, init);
      seen.push({ status: res.status, sentAt, answeredAt: performance.now(), ms: res.headers.get('retry-after-ms'), s: res.headers.get('retry-after') });
      return res;
    };
    const client = new OpenAI({ apiKey: key, baseURL: base(), maxRetries: 1, fetch: fetchSeen });
    const done = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'are you there' }], max_tokens: 5 });
    expect(done.choices[0]?.message.content).toBeTruthy();
    expect(seen.map((r) => r.status)).toEqual([504, 200]);
    const [timedOut, retried] = seen as [(typeof seen)[0], (typeof seen)[0]];
    expect(Number(timedOut.ms)).toBeGreaterThan(0);
    expect(Number(timedOut.ms)).toBeLessThanOrEqual(OPEN_MS);
    expect(timedOut.s).toBe(String(Math.max(1, Math.ceil(Number(timedOut.ms) / 1000))));
    expect(retried.sentAt - timedOut.answeredAt).toBeGreaterThanOrEqual(Number(timedOut.ms) - 50);
  });
});
