import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, type RedisServer, startPostgres, startRedis } from '@gw/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';
import { chatBody, post } from './helpers/idempotent.js';
import { startTcpProxy, type TcpProxy } from './helpers/tcp-proxy.js';

let redis: RedisServer;
let pg: PostgresServer;
let proxy: TcpProxy;
let sim: Simulator;
let one: TestGateway;
let two: TestGateway;

beforeAll(async () => {
  [redis, pg, sim] = await Promise.all([startRedis(), startPostgres(), startSimulator({ latencyScale: 0 })]);
  proxy = await startTcpProxy(Number(new URL(redis.url).port));
  const databaseUrl = await pg.createDatabase();
  const redisUrl = `redis://127.0.0.1:${proxy.port}`;
  one = await startGateway({ sim, databaseUrl, redisUrl });
  two = await startGateway({ sim, databaseUrl, redisUrl });
}, 60_000);

afterAll(async () => {
  await Promise.all([one?.close(), two?.close()]);
  await proxy?.close();
  await Promise.all([sim?.close(), redis?.stop(), pg?.stop()]);
});

describe('a revocation while Redis stops answering on open connections (a partition, a paused server)', () => {
  it('reaches the other instance within seconds, not once its cached key runs out (30 s)', async () => {
    const { id, key } = await one.createKey({ rateLimitRpm: 1000 });
    // Both instances know the key.
    for (const gw of [one, two]) expect((await post(gw.baseA, key, chatBody('known'))).status).toBe(200);
    proxy.hold();
    try {
      expect((await one.admin('POST', `/keys/${id}/revoke`)).status).toBe(200);
      // Nothing published reaches the other instance, whose subscriber connection stays open and silent.
      await eventually(async () => expect((await post(two.baseA, key, chatBody('after the revocation'))).status).toBe(401), 6_000);
    } finally {
      proxy.release();
    }
  }, 30_000);
});
