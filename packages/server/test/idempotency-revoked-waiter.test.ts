import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';

// A repeat waiting for its first request (which then fails) while the key is revoked.
let gw: TestGateway;

beforeAll(async () => {
  gw = await startGateway({
    catalogue: (c) => ({ ...c, providers: c.providers.map((p) => (p.id === 'mistral' ? { ...p, timeoutMs: 1000 } : p)) }),
  });
}, 60_000);
afterAll(async () => {
  await gw?.close();
});

const body = { model: 'mistral/medium', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] };
const send = (key: string, headers: Record<string, string> = {}) =>
  fetch(`${gw.baseA}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('a key revoked while a repeat of its keyed request waits', () => {
  it('answers the repeat 401 when the first request fails, with no upstream call after the revocation', async () => {
    const mistral = gw.sim.providers.mistral;
    if (!mistral) throw new Error('no mistral');
    const { id, key } = await gw.createKey({ rateLimitRpm: 1000 });
    const keyed = { 'X-Idempotency-Key': 'revoked-waiter' };
    mistral.setFault({ kind: 'hang', times: 1 });
    const callsBefore = mistral.stats().total;
    const first = send(key, keyed);
    while (mistral.stats().inFlight === 0) await sleep(10);
    const repeat = send(key, keyed);
    await sleep(200);
    expect((await gw.admin('POST', `/keys/${id}/revoke`)).status).toBe(200);
    expect((await send(key)).status).toBe(401);
    // The first times out (504) and gives up its claim; the repeat, which was waiting, takes it over.
    expect((await first).status).toBe(504);
    const repeated = await repeat;
    expect([repeated.status, ((await repeated.json()) as { error: { code: string } }).error.code]).toEqual([401, 'unauthorized']);
    expect(mistral.stats().total - callsBefore).toBe(1);
    mistral.clearFaults();
  });
});
