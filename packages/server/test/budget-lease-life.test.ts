import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, type RedisServer, startPostgres, startRedis } from '@gw/testkit';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chat, worst } from './helpers/budget-chat.js';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';

// Two instances sharing PostgreSQL, their Redis stopped once they are up: budgets are held in the database's leases.
let redis: RedisServer;
let postgres: PostgresServer;
let sim: Simulator;
let g1: TestGateway;
let g2: TestGateway;
let db: pg.Client;

beforeAll(async () => {
  [redis, postgres, sim] = await Promise.all([startRedis(), startPostgres(), startSimulator({ latencyScale: 0 })]);
  const databaseUrl = await postgres.createDatabase();
  g1 = await startGateway({ sim, redisUrl: redis.url, databaseUrl, leaseSweepMs: 200 });
  g2 = await startGateway({ sim, redisUrl: redis.url, databaseUrl, leaseSweepMs: 200 });
  await redis.stop();
  db = new pg.Client(databaseUrl);
  await db.connect();
}, 60_000);

afterAll(async () => {
  await db?.end();
  await Promise.all([g1?.close(), g2?.close()]);
  await sim?.close();
  await postgres?.stop();
});

const nano = (eur: number) => Math.round(eur * 1e9);

async function spentOf(id: string): Promise<number> {
  await Promise.all([g1, g2].map((g) => g.gateway.services.usage.flush()));
  return ((await g1.admin<{ spent: number }>('GET', `/keys/${id}`)).body as { spent: number }).spent;
}

describe('budget leases that have run out', () => {
  it('are deleted in batches by every instance at once, while a live lease stays and still holds its room', async () => {
    // A key whose room a live lease of an instance elsewhere holds, and one whose whole budget a lease that ran out held.
    const held = await g1.createKey({ budget: worst * 2, rateLimitRpm: 1000 });
    const freed = await g1.createKey({ budget: worst * 2, rateLimitRpm: 1000 });
    await db.query(
      `INSERT INTO budget_leases (scope_id, lease_id, nano, expires_at)
       SELECT 'key:gone-' || (i % 300), 'lease:gone:' || i, 1000, now() - interval '1 minute' FROM generate_series(1, 1200) AS i`,
    );
    await db.query(`INSERT INTO budget_leases VALUES ($1, 'lease:elsewhere:1', $2, now() + interval '1 hour')`, [`key:${held.id}`, nano(worst * 1.5)]);
    await db.query(`INSERT INTO budget_leases VALUES ($1, 'lease:elsewhere:2', $2, now() - interval '1 second')`, [`key:${freed.id}`, nano(worst * 2)]);
    await eventually(async () => {
      const { rows } = await db.query(`SELECT count(*)::int AS n FROM budget_leases WHERE expires_at <= now()`);
      expect(rows[0].n).toBe(0);
    }, 10_000);
    const { rows } = await db.query(`SELECT scope_id FROM budget_leases WHERE lease_id = 'lease:elsewhere:1'`);
    expect(rows).toEqual([{ scope_id: `key:${held.id}` }]);
    // The live lease leaves half a worst case: refused. The lease that ran out held nothing: admitted.
    expect((await chat(g2, held.key)).status).toBe(402);
    expect((await chat(g2, freed.key)).status).toBe(200);
  }, 30_000);
});

describe('a budget removed and set again while instances lease room of it', () => {
  it('what was spent without a budget is not admitted again from the room leased before: no request fits in a budget set just above it', async () => {
    // Room for 260 worst cases: each instance's first request leases room for 64 of them, far from the end, so none
    // goes back at its settle.
    const budget = worst * 260;
    const { id, key } = await g1.createKey({ budget, rateLimitRpm: 1000 });
    for (const gw of [g1, g2]) expect((await chat(gw, key)).status).toBe(200);
    expect((await g1.admin('PATCH', `/keys/${id}`, { budget: null })).status).toBe(200);
    // Without a budget, one request spends more than the old budget: a long prompt. The other instance sees none of it.
    const long = [{ role: 'user', content: 'How much is left? '.repeat(8_000) }];
    expect((await chat(g1, key, 'A', { messages: long })).status).toBe(200);
    const spent = await spentOf(id);
    expect(spent).toBeGreaterThan(budget);
    // Set again, above the old budget, with room for half a request's worst case.
    const again = spent + worst / 2;
    expect((await g1.admin('PATCH', `/keys/${id}`, { budget: again })).status).toBe(200);
    // Without Redis the other instance reads the key again at its first use past 250 ms, served as before (README).
    await new Promise((r) => setTimeout(r, 300));
    expect((await fetch(`${g2.baseA}/models`, { headers: { authorization: `Bearer ${key}` } })).status).toBe(200);
    await new Promise((r) => setTimeout(r, 100));
    const statuses = [];
    for (const gw of [g1, g2, g1, g2]) statuses.push((await chat(gw, key)).status);
    expect(statuses).toEqual([402, 402, 402, 402]);
    expect(await spentOf(id)).toBeLessThanOrEqual(again);
  }, 30_000);
});
