import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';

/** A chat request of about `kb` KiB whose prompt the provider takes (the simulator's Scaleway answers it after its latency). */
function chat(kb: number) {
  return JSON.stringify({ model: 'mistral/small', max_tokens: 5, messages: [{ role: 'user', content: 'a '.repeat(kb * 512) }] });
}

describe('GW_BODY_MEMORY_MB', () => {
  let gw: TestGateway;
  let key: string;
  beforeAll(async () => {
    gw = await startGateway({ env: { GW_BODY_MEMORY_MB: '1' } });
    key = (await gw.createKey({ rateLimitRpm: 1000 })).key;
  });
  afterAll(() => gw.close());

  const post = (base: string, body: string) =>
    fetch(`${base}/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body });

  it('refuses a body that would pass the bound with 503 out_of_resources (Retry-After: 1) while others are held, and takes it once they are let go', async () => {
    gw.sim.providers.scaleway?.configure({ latencyMs: 1_500 });
    try {
      // Two bodies of 400 KiB are held at the provider: 0.8 MiB of the 1 MiB bound.
      const held = [post(gw.baseA, chat(400)), post(gw.baseA, chat(400))];
      await new Promise((r) => setTimeout(r, 500));
      for (const [base, type] of [
        [gw.baseA, 'service_unavailable'],
        [gw.baseB, 'server_error'],
      ] as const) {
        const res = await post(base, chat(400));
        expect(res.status).toBe(503);
        expect(res.headers.get('retry-after')).toBe('1');
        const { error } = (await res.json()) as { error: { code: string; type: string; message: string } };
        expect(error.code).toBe('service_unavailable');
        expect(error.type).toBe(type);
        expect(error.message).toContain('GW_BODY_MEMORY_MB');
      }
      // A small body still fits beside them.
      expect((await post(gw.baseA, chat(1))).status).toBe(200);
      for (const res of await Promise.all(held)) expect(res.status).toBe(200);
      // Let go as their answers ended (a refused body never counted).
      expect(gw.gateway.services.bodyMemory.held).toBe(0);
      expect((await post(gw.baseA, chat(400))).status).toBe(200);
    } finally {
      gw.sim.providers.scaleway?.configure({ latencyMs: 0 });
    }
  }, 30_000);
});
