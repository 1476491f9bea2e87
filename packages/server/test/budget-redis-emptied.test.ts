import type { Simulator } from '@gw/simulator';
import type { PostgresServer, RedisServer } from '@gw/testkit';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { chat, worst } from './helpers/budget-chat.js';
import { eventually, type TestGateway } from './helpers/gateway.js';
import { sharedInstancesPerFile } from './helpers/shared-instances.js';

// Three instances sharing Redis and PostgreSQL; Redis loses its data (FLUSHALL) while requests run, its connections up.
let redis: RedisServer;
let pg: PostgresServer;
let sim: Simulator;
let gws: TestGateway[];

sharedInstancesPerFile(3, (started) => ({ redis, pg, sim, gws } = started));

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const at = (i: number) => gws[i % gws.length] as TestGateway;

describe('Redis emptied while requests run', () => {
  it('their holds are taken again: what is admitted next leaves their room, and spend stays within the budget', async () => {
    const budget = worst * 10;
    const { id, key } = await at(0).createKey({ budget, rateLimitRpm: 100_000 });
    // Ten requests fill the budget with their holds and run for 3 s: past the second a total lost with Redis's data
    // waits before it is loaded again (the usage records of costs settled before the loss are written meanwhile).
    sim.providers.scaleway?.setFault({ kind: 'latency', ms: 3000, times: 10 });
    const running = Array.from({ length: 10 }, (_, i) => chat(at(i), key).then((r) => r.status));
    // All ten admitted (each at its upstream) before Redis loses their holds.
    await eventually(() => expect(sim.providers.scaleway?.stats().inFlight).toBe(10), 2000);
    const admin = new Redis(redis.url);
    await admin.flushall();
    admin.disconnect();
    // Meanwhile and after they end, one request every 20 ms, round the instances.
    const later: Promise<number>[] = [];
    for (let i = 0; i < 80; i++) {
      later.push(chat(at(i), key).then((r) => r.status));
      await sleep(20);
    }
    expect(await Promise.all(running)).toEqual(Array(10).fill(200));
    // While the ten run, their holds leave no room.
    expect((await Promise.all(later)).slice(0, 30)).toEqual(Array(30).fill(402));
    await sleep(1000);
    await Promise.all(gws.map((g) => g.gateway.services.usage.flush()));
    const { spent } = (await at(0).admin<{ spent: number }>('GET', `/keys/${id}`)).body;
    expect(spent).toBeLessThanOrEqual(budget);
    expect(sim.providers.scaleway?.fault()).toBeNull();
  });
});
