import { type Simulator, startSimulator } from '@gw/simulator';
import { type RedisServer, startRedis } from '@gw/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';

let redis: RedisServer;
let sim: Simulator;
let gw: TestGateway;
let admin: Redis;

beforeAll(async () => {
  [redis, sim] = await Promise.all([startRedis(), startSimulator({ latencyScale: 0 })]);
  gw = await startGateway({ sim, redisUrl: redis.url });
  admin = new Redis(redis.url);
}, 60_000);

afterAll(async () => {
  admin?.disconnect();
  await gw?.close();
  await Promise.all([sim?.close(), redis?.stop()]);
});

/** The ids of the connections subscribed to the key events. */
const subscriberIds = async (): Promise<string[]> =>
  ((await admin.client('LIST', 'TYPE', 'pubsub')) as string)
    .split('\n')
    .filter((line) => line.includes('sub=') && !line.includes(' sub=0 '))
    .map((line) => /\bid=(\d+)/.exec(line)?.[1] ?? '');

describe('a Redis user without PING (an ACL listing @read @write @pubsub)', () => {
  it("keeps the instance's subscriber connection: the ping's error reply is an answer, not silence", async () => {
    await eventually(async () => expect(await subscriberIds()).toHaveLength(1), 10_000);
    const [before] = await subscriberIds();
    await admin.call('ACL', 'SETUSER', 'default', '-ping');
    try {
      // An unanswered ping drops the connection after 5 s.
      await new Promise((r) => setTimeout(r, 7_000));
      expect(await subscriberIds()).toEqual([before]);
      // Nor is Redis reported unreachable by the readiness check, which pings it too.
      expect(await (await fetch(`${gw.url}/readyz`)).json()).toMatchObject({ status: 'ready', redis: 'ok' });
    } finally {
      await admin.call('ACL', 'SETUSER', 'default', '+ping');
    }
  }, 30_000);
});

describe('a Redis user without SUBSCRIBE when an instance starts', () => {
  it('subscribes once SUBSCRIBE is allowed, where it stayed without a subscription until its connection dropped', async () => {
    await admin.call('ACL', 'SETUSER', 'default', '-subscribe');
    let late: TestGateway | undefined;
    try {
      late = await startGateway({ sim, redisUrl: redis.url });
      expect(await subscriberIds()).toHaveLength(1);
      await admin.call('ACL', 'SETUSER', 'default', '+subscribe');
      await eventually(async () => expect(await subscriberIds()).toHaveLength(2), 5_000);
    } finally {
      await admin.call('ACL', 'SETUSER', 'default', '+subscribe');
      await late?.close();
    }
  }, 30_000);
});
