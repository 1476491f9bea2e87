import { type Simulator, startSimulator } from '@gw/simulator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';
import { post, usageOf } from './helpers/idempotent.js';

let sim: Simulator;
let gw: TestGateway;

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  gw = await startGateway({ sim, env: { GW_IDEMPOTENCY_KEPT_MB: '1' } });
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await sim?.close();
});

/** 100 one-token inputs: about 7 MB of JSON for 100 tokens (3,584 dimensions; B's beta model, 1,024: 2 MB). */
async function embed(base: string, key: string, idempotencyKey: string, model = 'baai/bge-multilingual-gemma2', inputs = 100) {
  const res = await fetch(`${base}/embeddings`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-idempotency-key': idempotencyKey },
    body: JSON.stringify({ model, input: Array.from({ length: inputs }, () => 'a') }),
  });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

describe('GW_IDEMPOTENCY_KEPT_MB', () => {
  it('an answer past its key’s allowance is not kept whole: a repeat is a 422 saying so, never a second call or charge; other keys keep theirs', async () => {
    const greedy = await gw.createKey({ rateLimitRpm: 10_000 });
    const other = await gw.createKey({ rateLimitRpm: 10_000 });
    const calls = () => Object.values(sim.providers).reduce((n, p) => n + (p.stats().byEndpoint.embeddings ?? 0), 0);
    const before = calls();
    const first = await embed(gw.baseA, greedy.key, 'big-1');
    expect(first.status).toBe(200);
    expect(first.text.length).toBeGreaterThan(2 ** 20);
    const repeat = await embed(gw.baseA, greedy.key, 'big-1');
    expect([repeat.status, repeat.headers.get('idempotent-replayed')]).toEqual([422, 'true']);
    expect(JSON.parse(repeat.text).error).toMatchObject({ code: 'unprocessable_entity', param: 'X-Idempotency-Key' });
    expect(JSON.parse(repeat.text).error.message).toMatch(/was answered \(200\) and billed, but its answer \(\d+ bytes\) was not kept/);
    // In variant B's envelope when the request was B's (its path is part of the fingerprint).
    expect((await embed(gw.baseB, greedy.key, 'big-b', 'baai/bge-m3')).status).toBe(200);
    const repeatB = await embed(gw.baseB, greedy.key, 'big-b', 'baai/bge-m3');
    expect([repeatB.status, JSON.parse(repeatB.text).error.code]).toEqual([422, 'unprocessable_entity']);
    expect(calls() - before).toBe(2);
    expect((await usageOf([gw], greedy.id)).length).toBe(2);
    // The allowance is the key's own: another key's small answer is kept and replayed as it was.
    const chat = { model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'kept' }], max_tokens: 5 };
    const small = await post(gw.baseA, other.key, chat, { 'x-idempotency-key': 'small-1' });
    const again = await post(gw.baseA, other.key, chat, { 'x-idempotency-key': 'small-1' });
    expect([again.status, again.headers.get('idempotent-replayed'), again.text]).toEqual([200, 'true', small.text]);
  }, 60_000);

  it('is one allowance for both variants: answers kept on /v1 count against what /alt/v1 may keep', async () => {
    const { key } = await gw.createKey({ rateLimitRpm: 10_000 });
    const onA = await embed(gw.baseA, key, 'half-a', 'baai/bge-multilingual-gemma2', 20);
    expect(onA.text.length).toBeGreaterThan(0.5 * 2 ** 20);
    expect((await embed(gw.baseA, key, 'half-a', 'baai/bge-multilingual-gemma2', 20)).status).toBe(200);
    const onB = await embed(gw.baseB, key, 'half-b', 'baai/bge-m3', 30);
    expect(onB.text.length).toBeGreaterThan(2 ** 20 - onA.text.length);
    const repeatB = await embed(gw.baseB, key, 'half-b', 'baai/bge-m3', 30);
    expect([repeatB.status, repeatB.headers.get('idempotent-replayed')]).toEqual([422, 'true']);
  }, 60_000);
});
