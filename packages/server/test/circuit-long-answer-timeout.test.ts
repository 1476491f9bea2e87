import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';

// mistral/large and mistral/medium have one offer each, mistral's (a circuit each). A short read timeout: 1 s, so a call
// may generate 20 tokens within it at the floor rate of 20 tokens per second (upstream-call.ts).
const MODEL = 'mistral/large';
const HUNG_MODEL = 'mistral/medium';
const TIMEOUT_MS = 1_000;

let gw: TestGateway;
let keyA: string;
let keyAId: string;
let keyB: string;

beforeAll(async () => {
  gw = await startGateway({
    catalogue: (c) => ({ ...c, providers: c.providers.map((p) => (p.id === 'mistral' ? { ...p, timeoutMs: TIMEOUT_MS } : p)) }),
  });
  ({ key: keyA, id: keyAId } = await gw.createKey({ name: 'long essays' }));
  keyB = (await gw.createKey({ name: 'small asks' })).key;
});
afterAll(() => gw?.close());

const mistral = () => {
  const p = gw.sim.providers.mistral;
  if (!p) throw new Error('no mistral in the simulator');
  return p;
};

async function chat(
  key: string,
  extra: Record<string, unknown>,
  model = MODEL,
): Promise<{ status: number; body: { error?: { code?: string; message?: string } } }> {
  const res = await fetch(`${gw.baseA}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'write a long essay' }], ...extra }),
  });
  return { status: res.status, body: (await res.json()) as { error?: { code?: string; message?: string } } };
}

describe("a non-streamed chat call's headers timeout and the offer's circuit", () => {
  it('long answers asked for by one key time out (504, unbilled) without pausing the provider for another key', async () => {
    // The provider generates 1 token per ms and sends its headers after the whole answer: 3,000 tokens take 3 s. The
    // last asks for no max_tokens: its cap is what the context window leaves.
    mistral().configure({ chunkGapMs: 1, answerTokens: 4_000 });
    try {
      const long = [{ max_tokens: 4_000 }, { max_tokens: 4_000 }, { max_completion_tokens: 4_000 }, { max_tokens: 3_000 }, {}];
      const asked = Promise.all(long.map((extra) => chat(keyA, extra)));
      // Meanwhile the provider answers another key's small ask: it is healthy, only slow to write long answers.
      await new Promise((r) => setTimeout(r, 200));
      expect((await chat(keyB, { max_tokens: 16 })).status).toBe(200);
      const answers = await asked;
      expect(answers.map((a) => [a.status, a.body.error?.code])).toEqual(long.map(() => [504, 'upstream_timeout']));
    } finally {
      mistral().configure({ chunkGapMs: 0, answerTokens: null });
    }
    const small = await chat(keyB, { max_tokens: 16 });
    expect([small.status, small.body.error?.message]).toEqual([200, undefined]);
    expect((await gw.admin<{ spent: number }>('GET', `/keys/${keyAId}`)).body.spent).toBe(0);
  });

  it('small answers that time out still open the circuit: the next request is paused', async () => {
    mistral().setFault({ kind: 'latency', ms: 4_000 });
    try {
      const small = [{ max_tokens: 16 }, { max_tokens: 20 }, { max_completion_tokens: 10 }, { max_tokens: 10, n: 2 }, { max_tokens: 1 }];
      const answers = await Promise.all(small.map((extra) => chat(keyA, extra)));
      expect(answers.map((a) => [a.status, a.body.error?.code])).toEqual(small.map(() => [504, 'upstream_timeout']));
    } finally {
      mistral().clearFaults();
    }
    const after = await chat(keyB, { max_tokens: 16 });
    expect(after.status).toBe(503);
    expect(after.body.error?.message).toContain('mistral failed recently and is paused');
  });

  it('long answers that time out while the provider answers nothing else (it hangs) open the circuit as any timeout', async () => {
    mistral().setFault({ kind: 'latency', ms: 4_000 });
    try {
      const long = [{}, {}, { max_tokens: 4_000 }, { max_completion_tokens: 4_000 }, {}];
      const answers = await Promise.all(long.map((extra) => chat(keyA, extra, HUNG_MODEL)));
      expect(answers.map((a) => [a.status, a.body.error?.code])).toEqual(long.map(() => [504, 'upstream_timeout']));
    } finally {
      mistral().clearFaults();
    }
    const after = await chat(keyB, { max_tokens: 16 }, HUNG_MODEL);
    expect(after.status).toBe(503);
    expect(after.body.error?.message).toContain('mistral failed recently and is paused');
  });
});
