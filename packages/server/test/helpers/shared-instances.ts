import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, type RedisServer, startPostgres, startRedis } from '@gw/testkit';
import { afterAll, beforeAll } from 'vitest';
import { startGateway, type TestGateway } from './gateway.js';

export interface SharedInstances {
  redis: RedisServer;
  pg: PostgresServer;
  sim: Simulator;
  gws: TestGateway[];
}

/**
 * For a test file: `count` gateway instances sharing one Redis and one PostgreSQL database, on a simulator without
 * latency, started before its tests and stopped after them; `use` receives them once started.
 */
export function sharedInstancesPerFile(count: number, use: (started: SharedInstances) => void): void {
  let started: Partial<SharedInstances> = {};
  beforeAll(async () => {
    const [redis, pg, sim] = await Promise.all([startRedis(), startPostgres(), startSimulator({ latencyScale: 0 })]);
    started = { redis, pg, sim, gws: [] };
    const databaseUrl = await pg.createDatabase();
    for (let i = 0; i < count; i++) started.gws?.push(await startGateway({ sim, redisUrl: redis.url, databaseUrl }));
    use(started as SharedInstances);
  }, 60_000);
  afterAll(async () => {
    await Promise.all((started.gws ?? []).map((g) => g.close()));
    await started.sim?.close();
    await started.redis?.stop();
    await started.pg?.stop();
  });
}
