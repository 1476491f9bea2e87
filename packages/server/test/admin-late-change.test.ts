import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, type RedisServer, startPostgres, startRedis } from '@gw/testkit';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';

let pg: PostgresServer;
let redis: RedisServer;
let sim: Simulator;
let one: TestGateway;
let two: TestGateway;

beforeAll(async () => {
  [pg, redis, sim] = await Promise.all([startPostgres(), startRedis(), startSimulator({ latencyScale: 0 })]);
  const databaseUrl = await pg.createDatabase();
  one = await startGateway({ databaseUrl, redisUrl: redis.url, sim });
  two = await startGateway({ databaseUrl, redisUrl: redis.url, sim });
}, 120_000);

afterAll(async () => {
  pg?.resume();
  await one?.close();
  await two?.close();
  await sim?.close();
  await Promise.all([pg?.stop(), redis?.stop()]);
});

async function status(gw: TestGateway, key: string): Promise<number> {
  const client = new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 0 });
  try {
    await client.chat.completions.create({ model: 'mistral/small', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 });
    return 200;
  } catch (err) {
    return (err as { status: number }).status;
  }
}

/** Runs `change` on instance one while PostgreSQL is frozen (its answer: 503), then lets the database go on. */
async function changeWhileFrozen(change: () => Promise<{ status: number }>): Promise<void> {
  pg.pause();
  try {
    expect((await change()).status).toBe(503);
  } finally {
    pg.resume();
  }
}

describe('a key change whose admin call answered 503 on a frozen database, and which the database then made', () => {
  it('a revocation shown by GET refuses the key on every instance within seconds, not once their caches lapse', async () => {
    const { id, key } = await one.createKey({ rateLimitRpm: 10_000 });
    expect(await status(one, key)).toBe(200);
    expect(await status(two, key)).toBe(200);
    await changeWhileFrozen(() => one.admin('POST', `/keys/${id}/revoke`));
    await eventually(async () => expect((await one.admin<{ revoked: boolean }>('GET', `/keys/${id}`)).body.revoked).toBe(true), 10_000);
    // The key cache is trusted for 30 s (GW_KEY_CACHE_TTL_MS): without word of the change, both instances serve on.
    await eventually(async () => {
      expect(await status(two, key)).toBe(401);
      expect(await status(one, key)).toBe(401);
    }, 5_000);
  }, 60_000);

  it('a budget lowered to 0 refuses the key on the other instance within seconds', async () => {
    const { id, key } = await one.createKey({ budget: 1, rateLimitRpm: 10_000 });
    expect(await status(two, key)).toBe(200);
    await changeWhileFrozen(() => one.admin('PATCH', `/keys/${id}`, { budget: 0 }));
    await eventually(async () => expect((await one.admin<{ budget: number }>('GET', `/keys/${id}`)).body.budget).toBe(0), 10_000);
    await eventually(async () => expect(await status(two, key)).toBe(402), 5_000);
  }, 60_000);

  it('a workspace whose models were narrowed refuses the others on the other instance within seconds', async () => {
    const ws = (await one.admin<{ id: string }>('POST', '/workspaces', { name: 'late', enabledModels: null })).body;
    const { key } = await one.createKey({ workspaceId: ws.id, rateLimitRpm: 10_000 });
    expect(await status(two, key)).toBe(200);
    await changeWhileFrozen(() => one.admin('PATCH', `/workspaces/${ws.id}`, { enabledModels: ['mistral/medium'] }));
    await eventually(
      async () => expect((await one.admin<{ enabledModels: string[] }>('GET', `/workspaces/${ws.id}`)).body.enabledModels).toEqual(['mistral/medium']),
      10_000,
    );
    await eventually(async () => expect(await status(two, key)).toBe(404), 5_000);
  }, 60_000);
});
