import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, type RedisServer, startPostgres, startRedis } from '@gw/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chat, MAX_TOKENS, worst } from './helpers/budget-chat.js';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';

// Two instances sharing Redis and PostgreSQL; the test stalls that Redis (SIGSTOP) and wakes it again.
let redis: RedisServer;
let pg: PostgresServer;
let sim: Simulator;
let one: TestGateway;
let two: TestGateway;

beforeAll(async () => {
  [redis, pg, sim] = await Promise.all([startRedis(), startPostgres(), startSimulator({ latencyScale: 0 })]);
  const databaseUrl = await pg.createDatabase();
  one = await startGateway({ sim, redisUrl: redis.url, databaseUrl });
  two = await startGateway({ sim, redisUrl: redis.url, databaseUrl });
  // A little upstream latency keeps a batch's requests truly concurrent.
  sim.providers.scaleway?.configure({ latencyMs: 30 });
}, 60_000);

afterAll(async () => {
  redis?.resume();
  await Promise.all([one?.close(), two?.close()]);
  await sim?.close();
  await redis?.stop();
  await pg?.stop();
});

async function spentOf(gw: TestGateway, id: string): Promise<number> {
  await Promise.all([one, two].map((g) => g.gateway.services.usage.flush()));
  return ((await gw.admin<{ spent: number }>('GET', `/keys/${id}`)).body as { spent: number }).spent;
}

describe('budgets when Redis stalls and comes back, spent through the other instance', () => {
  it('the first instance back does not admit against a total that lacks what the other spent meanwhile', async () => {
    const budget = worst * 20 + 1e-9;
    const { id, key } = await one.createKey({ budget, rateLimitRpm: 100_000 });
    const batch = async (n: number, gw: TestGateway) => (await Promise.all(Array.from({ length: n }, () => chat(gw, key)))).map((r) => r.status);
    expect(await batch(4, one)).toEqual([200, 200, 200, 200]);
    redis.pause();
    try {
      // The rest of the budget goes through the second instance's PostgreSQL lease; its records are stored.
      let statuses: number[] = [];
      for (let round = 0; round < 20 && !statuses.includes(402); round++) statuses = await batch(4, two);
      expect(statuses).toContain(402);
      await two.gateway.services.usage.flush();
    } finally {
      redis.resume();
    }
    // Straight after, the first instance is asked, before the second has brought Redis its costs.
    const after: number[] = [];
    const until = Date.now() + 2500;
    while (Date.now() < until) after.push(...(await batch(2, one)));
    // Its lease was refused room near the end before the budget was all spent: what is left is admitted, no more.
    expect(after).toContain(402);
    expect(await spentOf(one, id)).toBeLessThanOrEqual(budget);
    const probe = await one.createKey({ rateLimitRpm: 100_000 });
    for (const gw of [one, two]) await eventually(async () => expect((await chat(gw, probe.key)).headers.get('x-ratelimit-enforced')).toBe('true'), 5000);
  }, 60_000);

  it('requests the second admitted on its lease and still running when Redis wakes are held in its totals: the first admits only what is left', async () => {
    const budget = worst * 10 + 1e-9;
    const { id, key } = await one.createKey({ budget, rateLimitRpm: 100_000 });
    sim.providers.ovh?.configure({ latencyMs: 4_000, answerTokens: MAX_TOKENS });
    try {
      expect((await chat(one, key)).status).toBe(200);
      redis.pause();
      // Five long requests on the second instance, admitted on its PostgreSQL lease while Redis does not answer.
      const running = Array.from({ length: 5 }, () => chat(two, key, 'A', {}, 'ovh'));
      try {
        await eventually(() => expect(sim.providers.ovh?.stats().inFlight).toBe(5), 10_000);
      } finally {
        redis.resume();
      }
      // While they run, the first instance takes what is left, through Redis once it answers.
      const after: number[] = [];
      const until = Date.now() + 2500;
      while (Date.now() < until && !after.includes(402)) after.push(...(await Promise.all([chat(one, key), chat(one, key)])).map((r) => r.status));
      expect((await Promise.all(running)).map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
      expect(after).toContain(402);
      // The five running requests' room was not admitted a second time.
      expect(await spentOf(one, id)).toBeLessThanOrEqual(budget);
    } finally {
      sim.providers.ovh?.configure({ latencyMs: 0 });
    }
  }, 60_000);
});
