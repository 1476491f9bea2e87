import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, startPostgres } from '@gw/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';

let pg: PostgresServer;
let sim: Simulator;
let one: TestGateway;
let two: TestGateway;

// Instances sharing PostgreSQL without Redis: no shared resume buffer, a stream's events reach another instance only
// with its stored answer. The wait is short so that a repeat waiting in vain ends within the test.
const env = { GW_IDEMPOTENCY_KEPT_MB: '1', GW_IDEMPOTENCY_WAIT_MS: '1000' };

beforeAll(async () => {
  [pg, sim] = await Promise.all([startPostgres(), startSimulator({ latencyScale: 0 })]);
  const databaseUrl = await pg.createDatabase();
  one = await startGateway({ sim, databaseUrl, env });
  two = await startGateway({ sim, databaseUrl, env });
}, 60_000);

afterAll(async () => {
  await Promise.all([one?.close(), two?.close()]);
  await Promise.all([sim?.close(), pg?.stop()]);
});

const body = { model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'A long answer' }], stream: true };
const keyed = (base: string, key: string) =>
  fetch(`${base}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-idempotency-key': 'long-stream' },
    body: JSON.stringify(body),
  });

describe('a keyed stream past GW_IDEMPOTENCY_KEPT_MB on instances sharing PostgreSQL only', () => {
  it('is a 422 saying its answer was not kept on the other instance, not a 409 "still in progress" for 24 hours', async () => {
    for (const p of Object.values(sim.providers)) p.configure({ answerTokens: 20_000, chunkGapMs: 0 });
    const { key } = await one.createKey({ rateLimitRpm: 1000 });
    const first = await keyed(one.baseA, key);
    const text = await first.text();
    expect(text.length).toBeGreaterThan(2 ** 20);
    expect(text).toContain('data: [DONE]');
    for (const p of Object.values(sim.providers)) p.configure({ answerTokens: null });
    const repeat = await keyed(two.baseA, key);
    expect(repeat.status).toBe(422);
    const { error } = (await repeat.json()) as { error: { code: string; param: string; message: string } };
    expect(error).toMatchObject({ code: 'unprocessable_entity', param: 'X-Idempotency-Key' });
    expect(error.message).toMatch(/was answered \(200\) and billed, but its answer \(\d+ bytes\) was not kept/);
  }, 60_000);
});
