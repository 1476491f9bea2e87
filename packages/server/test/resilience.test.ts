import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, type RedisServer, startPostgres, startRedis } from '@gw/testkit';
import { Redis } from 'ioredis';
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
  await one?.close();
  await two?.close();
  await sim?.close();
  await pg?.stop();
  await redis?.stop();
});

const models = (gw: TestGateway, key: string) => fetch(`${gw.baseA}/models`, { headers: { authorization: `Bearer ${key}` } });
/** The ids variant B lists to `key` on `gw`: its workspace's models. */
const modelIdsB = async (gw: TestGateway, key: string) =>
  ((await (await fetch(`${gw.baseB}/models`, { headers: { authorization: `Bearer ${key}` } })).json()) as { data: { id: string }[] }).data.map((m) => m.id);

/** Runs `during` right after Redis dropped the instances' connections of `type` (pubsub: their subscriptions; normal: their commands). */
async function afterRedisDrops(type: 'pubsub' | 'normal', during: (admin: Redis) => Promise<void>): Promise<void> {
  const admin = new Redis(redis.url);
  try {
    // Both subscribed (a test before may have restarted Redis): the drop is what this test's instances miss.
    await eventually(async () => expect(await admin.pubsub('NUMSUB', 'gw:keys')).toEqual(['gw:keys', 2]), 10_000);
    await admin.client('KILL', 'TYPE', type);
    await during(admin);
  } finally {
    admin.disconnect();
  }
}
/**
 * Runs `during` while both instances' subscriptions are dropped and SUBSCRIBE is refused (they cannot subscribe again,
 * as with a Redis that keeps dropping them); then allows it and waits until both are subscribed again.
 */
async function whileUnsubscribed(during: (admin: Redis) => Promise<void>): Promise<void> {
  const admin = new Redis(redis.url);
  const subscribers = async (n: number) => expect(await admin.pubsub('NUMSUB', 'gw:keys')).toEqual(['gw:keys', n]);
  try {
    await eventually(() => subscribers(2), 10_000);
    await admin.call('ACL', 'SETUSER', 'default', '-subscribe');
    try {
      await admin.client('KILL', 'TYPE', 'pubsub');
      await during(admin);
      await subscribers(0);
    } finally {
      await admin.call('ACL', 'SETUSER', 'default', '+subscribe');
    }
    // They try again on a new connection each second.
    await eventually(() => subscribers(2), 10_000);
  } finally {
    admin.disconnect();
  }
}
const chat = (gw: TestGateway, key: string) =>
  fetch(`${gw.baseA}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'outage test' }] }),
  });

describe('two instances sharing PostgreSQL and Redis', () => {
  it('a key created on one instance works on the other; revocation reaches the other within a second', async () => {
    const { id, key } = await one.createKey();
    expect((await models(two, key)).status).toBe(200);
    expect((await models(one, key)).status).toBe(200);
    const revokedAt = Date.now();
    await one.admin('POST', `/keys/${id}/revoke`);
    await eventually(async () => expect((await models(two, key)).status).toBe(401), 1000);
    expect(Date.now() - revokedAt).toBeLessThan(1000);
  });

  it('a workspace changed on one instance (PATCH) is applied on the other within a second, though the other had it cached', async () => {
    const ws = await one.admin<{ id: string }>('POST', '/workspaces', { name: 'moving', enabledModels: null });
    const { key } = await one.createKey({ workspaceId: ws.body.id });
    expect((await modelIdsB(two, key)).length).toBeGreaterThan(1);
    const changedAt = Date.now();
    const patched = await one.admin<Record<string, unknown>>('PATCH', `/workspaces/${ws.body.id}`, { enabledModels: ['mistral/small'] });
    expect(patched.body).toMatchObject({ id: ws.body.id, name: 'moving', enabledModels: ['mistral/small'] });
    await eventually(async () => expect(await modelIdsB(two, key)).toEqual(['mistral/small']), 1000);
    expect(Date.now() - changedAt).toBeLessThan(1000);
  });

  it('after Redis restarts, both instances listen again: a revocation still reaches the other within a second', async () => {
    const { id, key } = await one.createKey();
    expect((await models(two, key)).status).toBe(200);
    await redis.restart();
    // Both instances are subscribed again once a message published now reaches the other one.
    const probe = await one.createKey();
    expect((await models(two, probe.key)).status).toBe(200);
    await eventually(async () => {
      await one.admin('POST', `/keys/${probe.id}/revoke`);
      expect((await models(two, probe.key)).status).toBe(401);
    }, 10_000);
    const revokedAt = Date.now();
    await one.admin('POST', `/keys/${id}/revoke`);
    await eventually(async () => expect((await models(two, key)).status).toBe(401), 1000);
    expect(Date.now() - revokedAt).toBeLessThan(1000);
  }, 30_000);

  it('a revocation made while Redis is down reaches the other instance once Redis is back, not at the key cache TTL (30 s)', async () => {
    const { id, key } = await one.createKey();
    expect((await models(two, key)).status).toBe(200);
    await redis.kill();
    try {
      expect((await one.admin('POST', `/keys/${id}/revoke`)).status).toBe(200);
      expect((await models(one, key)).status).toBe(401);
      expect((await models(two, key)).status).toBe(200);
    } finally {
      await redis.restart();
    }
    // ioredis reconnects within 2 s of Redis being back; the cache TTL is 30 s.
    await eventually(async () => expect((await models(two, key)).status).toBe(401), 8_000);
  }, 30_000);

  // Redis closes a subscriber that falls behind (client-output-buffer-limit pubsub) as it does here; the instances
  // subscribe again a reconnect backoff later (200 ms), and what was published meanwhile never reaches them.
  it('an instance whose subscription dropped re-reads the keys it knows at their next use: a revocation published meanwhile applies at once, not once it subscribes again', async () => {
    const { id, key } = await one.createKey();
    expect((await models(two, key)).status).toBe(200);
    await whileUnsubscribed(async () => {
      expect((await one.admin('POST', `/keys/${id}/revoke`)).status).toBe(200);
      // The request that finds the copy read before the loss has it read again; those after it see the store's answer.
      const revokedAt = Date.now();
      await eventually(async () => expect((await models(two, key)).status).toBe(401), 2_000);
      expect(Date.now() - revokedAt).toBeLessThan(1_000);
    });
  }, 30_000);

  it('an instance whose subscription dropped for a moment reads its workspaces again: a change published meanwhile applies from the next request', async () => {
    const ws = await one.admin<{ id: string }>('POST', '/workspaces', { name: 'blip', enabledModels: null });
    const { key } = await one.createKey({ workspaceId: ws.body.id });
    expect((await modelIdsB(two, key)).length).toBeGreaterThan(1);
    await afterRedisDrops('pubsub', async (admin) => {
      expect((await one.admin('PATCH', `/workspaces/${ws.body.id}`, { enabledModels: ['mistral/small'] })).status).toBe(200);
      expect(await admin.pubsub('NUMSUB', 'gw:keys')).toEqual(['gw:keys', 0]);
      expect(await modelIdsB(two, key)).toEqual(['mistral/small']);
    });
  }, 30_000);

  it('while an instance cannot hear changes, it trusts what it knows for a quarter second: a change made then applies within it; a refused subscribe is tried again', async () => {
    const ws = await one.admin<{ id: string }>('POST', '/workspaces', { name: 'deaf', enabledModels: null });
    const { id, key } = await one.createKey({ workspaceId: ws.body.id });
    expect((await models(two, key)).status).toBe(200);
    await whileUnsubscribed(async () => {
      await new Promise((r) => setTimeout(r, 600));
      // Read again since the loss: trusted for a quarter second, then read again at its next use.
      expect(await modelIdsB(two, key)).not.toEqual(['mistral/small']);
      expect((await one.admin('PATCH', `/workspaces/${ws.body.id}`, { enabledModels: ['mistral/small'] })).status).toBe(200);
      expect((await one.admin('POST', `/keys/${id}/revoke`)).status).toBe(200);
      const changedAt = Date.now();
      await eventually(async () => expect((await models(two, key)).status).toBe(401), 2_000);
      expect(Date.now() - changedAt).toBeLessThan(1_000);
    });
  }, 30_000);

  it('a revocation whose publish failed (the connection it goes out on dropped a moment before) is sent once that connection is back', async () => {
    const { id, key } = await one.createKey();
    expect((await models(two, key)).status).toBe(200);
    // The instances' command connections go (their subscriptions stay): the revocation's publish fails.
    await afterRedisDrops('normal', async () => {
      expect((await one.admin('POST', `/keys/${id}/revoke`)).status).toBe(200);
      expect((await models(two, key)).status).toBe(200);
    });
    await eventually(async () => expect((await models(two, key)).status).toBe(401), 8_000);
  }, 30_000);
});

describe('Redis away when an instance starts', () => {
  it('the instance starts and serves (the limiter failing open), and hears revocations once Redis is up', async () => {
    const late = await startRedis();
    await late.kill();
    const databaseUrl = await pg.createDatabase();
    const three = await startGateway({ databaseUrl, redisUrl: late.url, sim });
    const four = await startGateway({ databaseUrl, redisUrl: late.url, sim });
    try {
      const { id, key } = await three.createKey();
      const res = await chat(four, key);
      expect(res.status).toBe(200);
      expect(res.headers.get('x-ratelimit-enforced')).toBe('false');
      await late.restart();
      // Subscribed once Redis is back: a revocation on one reaches the other through it.
      await eventually(async () => expect((await chat(four, key)).headers.get('x-ratelimit-enforced')).toBe('true'), 10_000);
      await eventually(async () => {
        const probe = await three.createKey();
        expect((await models(four, probe.key)).status).toBe(200);
        await three.admin('POST', `/keys/${probe.id}/revoke`);
        expect((await models(four, probe.key)).status).toBe(401);
      }, 10_000);
      await three.admin('POST', `/keys/${id}/revoke`);
      await eventually(async () => expect((await models(four, key)).status).toBe(401), 1000);
    } finally {
      await Promise.all([three.close(), four.close()]);
      await late.stop();
    }
  }, 60_000);
});

describe('while the database is unreachable', () => {
  it('known keys keep working, unknown keys get 503 (never 401), usage is kept, and all recovers', async () => {
    const known = await one.createKey();
    const unknown = await one.createKey();
    expect((await chat(one, known.key)).status).toBe(200);
    pg.pause();
    try {
      const res = await chat(one, known.key);
      expect(res.status).toBe(200);
      const requestId = res.headers.get('x-request-id') as string;
      const started = Date.now();
      const refused = await models(one, unknown.key);
      expect(refused.status).toBe(503);
      expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('service_unavailable');
      expect(refused.headers.get('retry-after')).toBe('1');
      expect(Date.now() - started).toBeLessThan(4000);
      const refusedB = await fetch(`${one.baseB}/models`, { headers: { authorization: `Bearer ${unknown.key}` } });
      expect(refusedB.status).toBe(503);
      // The admin API says the same of the store: retry shortly, not an internal error.
      const creating = await one.admin<{ error: { code: string } }>('POST', '/keys', { name: 'during-outage' });
      expect([creating.status, creating.body.error.code]).toEqual([503, 'service_unavailable']);
      pg.resume();
      await eventually(async () => expect((await models(one, unknown.key)).status).toBe(200), 20_000);
      await eventually(async () => {
        await one.gateway.services.usage.flush();
        expect(await one.gateway.services.store.usage.list({ requestId })).toHaveLength(1);
      }, 20_000);
    } finally {
      pg.resume();
    }
  }, 60_000);
});
