import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';

// A stream with X-Idempotency-Key whose client leaves before its first event runs on for the retry the key was
// sent for. Its client was sent nothing: its usage record says the 499 that /metrics and the log say, at its cost.

let gw: TestGateway;
let key: string;

beforeAll(async () => {
  gw = await startGateway();
  key = (await gw.createKey({ rateLimitRpm: 1000 })).key;
}, 60_000);
afterAll(() => gw?.close());
beforeEach(() => resetProviders(gw.sim));

async function count499(): Promise<number> {
  const text = await (await fetch(`${gw.url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith('gw_http_requests_total{route="/v1/chat/completions",variant="a",status="499"}'));
  return Number(line?.split(' ').at(-1) ?? 0);
}

describe('a keyed stream whose client left before its first event', () => {
  it('is recorded as a 499 client_closed, billed for the stream that ran on', async () => {
    gw.sim.providers.nebius?.configure({ latencyMs: 0, ttftMs: 400, chunkGapMs: 0 });
    const before = await count499();
    const ac = new AbortController();
    const answer = fetch(`${gw.baseA}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-idempotency-key': 'left-early-1', 'x-gateway-provider': 'nebius' },
      body: JSON.stringify({ model: 'qwen/qwen3-32b', messages: [{ role: 'user', content: 'Bonjour' }], stream: true }),
      signal: ac.signal,
    });
    setTimeout(() => ac.abort(), 100);
    await expect(answer).rejects.toThrow();
    // The stream runs on to its end upstream (about 0.4 s), then is recorded.
    let records: Awaited<ReturnType<typeof gw.gateway.services.store.usage.list>> = [];
    for (let i = 0; i < 100 && records.length === 0; i++) {
      await new Promise((r) => setTimeout(r, 50));
      await gw.gateway.services.usage.flush();
      records = (await gw.gateway.services.store.usage.list({})).filter((r) => r.model === 'qwen/qwen3-32b' && r.streamed);
    }
    expect(records).toHaveLength(1);
    expect(records[0]).toMatchObject({ status: 499, errorCode: 'client_closed', provider: 'nebius', streamed: true });
    expect(records[0]?.completionTokens).toBeGreaterThan(0);
    expect(Number(records[0]?.cost)).toBeGreaterThan(0);
    expect(await count499()).toBe(before + 1);
  });
});
