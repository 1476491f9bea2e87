import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, type RedisServer, startPostgres, startRedis } from '@gw/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chat, MAX_TOKENS } from './helpers/budget-chat.js';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';
import { startTcpProxy, type TcpProxy } from './helpers/tcp-proxy.js';

// Two instances on one Redis (which the test restarts) and one PostgreSQL; the second reaches Redis through a proxy
// the test can cut, to stand for a network that keeps it from Redis while the first still reaches it, and PostgreSQL
// through one the test can hold, to stand for a busy database that has not yet taken its usage records.
let redis: RedisServer;
let pg: PostgresServer;
let sim: Simulator;
let proxy: TcpProxy;
let pgProxy: TcpProxy;
let g1: TestGateway;
let g2: TestGateway;
let probe: Redis;

beforeAll(async () => {
  [redis, pg, sim] = await Promise.all([startRedis(), startPostgres(), startSimulator({ latencyScale: 0 })]);
  [proxy, pgProxy] = await Promise.all([startTcpProxy(redis.port), startTcpProxy(pg.port)]);
  const databaseUrl = await pg.createDatabase();
  g1 = await startGateway({ sim, redisUrl: redis.url, databaseUrl });
  g2 = await startGateway({ sim, redisUrl: `redis://127.0.0.1:${proxy.port}`, databaseUrl: databaseUrl.replace(`:${pg.port}/`, `:${pgProxy.port}/`) });
  probe = new Redis(redis.url, { maxRetriesPerRequest: 1 });
  probe.on('error', () => {});
}, 60_000);

afterAll(async () => {
  probe?.disconnect();
  proxy?.mend();
  pgProxy?.release();
  await Promise.all([g1?.close(), g2?.close()]);
  await Promise.all([proxy?.close(), pgProxy?.close()]);
  await sim?.close();
  await redis?.stop();
  await pg?.stop();
});

const enforced = async (gw: TestGateway, key: string) => {
  const res = await chat(gw, key);
  expect([res.status, res.headers.get('x-ratelimit-enforced')]).toEqual([200, 'true']);
};

describe('budgets when a cost settled on the leases is stored before it is added to Redis', () => {
  it("a total raised to the store's meanwhile (by another instance, after Redis restarted) has it already: it is not added again", async () => {
    sim.providers.scaleway?.configure({ latencyMs: 0, answerTokens: MAX_TOKENS });
    // Long enough to outlast Redis's restart and the second instance's return on a slow machine: the raise this test
    // is about must come after that instance's cost on the leases is stored.
    sim.providers.ovh?.configure({ latencyMs: 6_000, answerTokens: MAX_TOKENS });
    const { id, key } = await g1.createKey({ rateLimitRpm: 1000, budget: 1 });
    const { workspaceId } = (await g1.admin<{ workspaceId: string | null }>('GET', `/keys/${id}`)).body;
    const spentKey = `gw:budget:{${workspaceId ? `ws:${workspaceId}` : `key:${id}`}}:key:${id}:spent`;
    const stored = async () => {
      await Promise.all([g1, g2].map((g) => g.gateway.services.usage.flush()));
      return (await g1.admin<{ spent: number }>('GET', `/keys/${id}`)).body.spent;
    };
    const inRedis = async () => Number(await probe.get(spentKey)) / 1e9;

    // A request of the first instance that Redis admitted, still running when Redis restarts empty: its settle will
    // find no hold, and that instance then raises the total to the store's.
    let ended = false;
    const running = chat(g1, key, 'A', {}, 'ovh').finally(() => {
      ended = true;
    });
    await eventually(() => expect(sim.providers.ovh?.stats().inFlight).toBe(1), 5000);
    await redis.kill();
    // The second instance spends on the leases while Redis is down, and sees its restart once it is back.
    expect((await chat(g2, key)).status).toBe(200);
    await redis.restart();
    // Back on Redis once its breaker lets it (a second after the failure), it loads the total there.
    await eventually(async () => {
      expect((await chat(g2, key)).status).toBe(200);
      expect(await probe.exists(spentKey)).toBe(1);
    }, 10_000);
    // Then it loses Redis again (its network only) and spends on the leases: a cost it owes Redis's total, written
    // to the store with its next usage flush.
    proxy.cut();
    const onLeases = await chat(g2, key);
    expect(onLeases.status).toBe(200);
    expect(onLeases.headers.get('x-ratelimit-enforced')).not.toBe('true');
    await g2.gateway.services.usage.flush();
    expect(ended, "the first instance's request must still run when the cost on the leases is stored").toBe(false);
    // The first instance's request ends meanwhile, and it raises the total to the store's, which has that cost.
    expect((await running).status).toBe(200);
    const afterRaise = await stored();
    await eventually(async () => expect(await inRedis()).toBeCloseTo(afterRaise, 12), 5000);

    // The second instance reaches Redis again and catches up: the cost is in the total already.
    proxy.mend();
    await new Promise((r) => setTimeout(r, 1000));
    await eventually(() => enforced(g2, key), 10_000);
    // A cost owed from the leases that the catch-up finds a total took the store's value since is not added but raised
    // to once stored (a moment after the flush): never above the store, which a cost added twice would be for good.
    const total = await stored();
    await eventually(async () => expect(await inRedis()).toBeCloseTo(total, 12), 5000);
    // And stays so: the raises after a restart (2 s and 10 s later) bring a total up, never down.
    await new Promise((r) => setTimeout(r, 2500));
    expect(await inRedis()).toBeCloseTo(await stored(), 12);
  }, 60_000);

  it('a total Redis does not hold when the costs owed to it come is loaded with them: the owing instance writes them first', async () => {
    sim.providers.ovh?.configure({ latencyMs: 1_000, answerTokens: MAX_TOKENS });
    // A key never used through Redis: Redis holds no total of it.
    const { id, key } = await g1.createKey({ rateLimitRpm: 1000, budget: 1 });
    const { workspaceId } = (await g1.admin<{ workspaceId: string | null }>('GET', `/keys/${id}`)).body;
    const spentKey = `gw:budget:{${workspaceId ? `ws:${workspaceId}` : `key:${id}`}}:key:${id}:spent`;
    const inRedis = async () => Number(await probe.get(spentKey)) / 1e9;

    // The second instance, cut off from Redis, spends on the leases; its database stops answering before the
    // request ends, so the request's usage record waits in its memory.
    proxy.cut();
    const onLeases = chat(g2, key, 'A', {}, 'ovh');
    await eventually(() => expect(sim.providers.ovh?.stats().inFlight).toBe(1), 5000);
    pgProxy.hold();
    const res = await onLeases;
    expect(res.status).toBe(200);
    expect(res.headers.get('x-ratelimit-enforced')).not.toBe('true');

    // It reaches Redis again and catches up: the total it owes the cost to is not there, so nothing can be added.
    proxy.mend();
    await eventually(async () => expect(await g2.gateway.services.redisHealth?.answers()).toBe(true), 10_000);
    await new Promise((r) => setTimeout(r, 300));
    // The first instance's request loads the total from the store. Without the owing instance's record there, the
    // total would lack that cost for good.
    const first = chat(g1, key);
    await new Promise((r) => setTimeout(r, 500));
    pgProxy.release();
    expect((await first).status).toBe(200);
    await Promise.all([g1, g2].map((g) => g.gateway.services.usage.flush()));
    const stored = (await g1.admin<{ spent: number }>('GET', `/keys/${id}`)).body.spent;
    expect(stored).toBeGreaterThan(0);
    await eventually(async () => expect(await inRedis()).toBeCloseTo(stored, 12), 5000);
    // And stays so once every later raise has run.
    await new Promise((r) => setTimeout(r, 2500));
    expect(await inRedis()).toBeCloseTo(stored, 12);
  }, 60_000);
});
