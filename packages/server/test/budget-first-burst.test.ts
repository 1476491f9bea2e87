import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, type RedisServer, startPostgres, startRedis } from '@gw/testkit';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_TOKENS, messages, worst } from './helpers/budget-chat.js';
import { startGateway, type TestGateway } from './helpers/gateway.js';

let redis: RedisServer;
let postgres: PostgresServer;
let sim: Simulator;
let gw: TestGateway;
let databaseUrl: string;

beforeAll(async () => {
  [redis, postgres, sim] = await Promise.all([startRedis(), startPostgres(), startSimulator({ latencyScale: 0 })]);
  databaseUrl = await postgres.createDatabase();
  gw = await startGateway({ sim, redisUrl: redis.url, databaseUrl });
  // A little upstream latency keeps the burst's requests in flight together.
  sim.providers.scaleway?.configure({ latencyMs: 30 });
}, 60_000);

afterAll(async () => {
  await gw?.close();
  await sim?.close();
  await redis?.stop();
  await postgres?.stop();
});

/** Holds the event loop, as a burst of requests read in one turn does on a saturated core. */
function hold(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    // The event loop is held.
  }
}

describe("a burst of a budget key's first requests, with Redis up", () => {
  it('reads the total from the store once and holds the budget in Redis, even when the event loop is held meanwhile', async () => {
    const budget = worst * 10 + 1e-9;
    const { id, key } = await gw.createKey({ budget, rateLimitRpm: 1000 });
    const keys = gw.gateway.services.store.keys;
    const getById = keys.getById.bind(keys);
    let reads = 0;
    keys.getById = (keyId) => {
      const read = getById(keyId);
      // The total's read; the first is followed by a long turn of the loop, as under a burst on a saturated core.
      if (keyId === id && ++reads === 1) queueMicrotask(() => hold(2_100));
      return read;
    };
    let statuses: number[];
    try {
      const responses = await Promise.all(
        Array.from({ length: 50 }, () =>
          fetch(`${gw.baseA}/chat/completions`, {
            method: 'POST',
            headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-gateway-provider': 'scaleway' },
            body: JSON.stringify({ model: 'meta/llama-3.3-70b', messages, max_tokens: MAX_TOKENS }),
          }).then(async (r) => {
            await r.arrayBuffer();
            return r.status;
          }),
        ),
      );
      statuses = responses;
    } finally {
      keys.getById = getById;
    }
    expect(statuses.every((s) => s === 200 || s === 402)).toBe(true);
    expect(statuses.filter((s) => s === 200).length).toBeGreaterThanOrEqual(10);
    // No request was held in PostgreSQL's leases, which are for Redis being away.
    const client = new pg.Client(databaseUrl);
    await client.connect();
    try {
      const leases = await client.query('SELECT count(*)::int AS n FROM budget_leases WHERE scope_id = $1', [`key:${id}`]);
      expect(leases.rows[0].n).toBe(0);
    } finally {
      await client.end();
    }
    // Each request read the total itself: 50 reads of the leases and of the total queued on the pool's few
    // connections, those that waited past its connect timeout failed, and the budget went to PostgreSQL's leases.
    expect(reads).toBe(1);
    await gw.gateway.services.usage.flush();
    const spent = (await gw.admin<{ spent: number }>('GET', `/keys/${id}`)).body.spent;
    expect(spent).toBeLessThanOrEqual(budget);
  }, 60_000);
});
