import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, type RedisServer, startPostgres, startRedis } from '@gw/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';

let redis: RedisServer;
let pg: PostgresServer;
let sim: Simulator;
let one: TestGateway;
let two: TestGateway;
let key: string;
let db: string;

beforeAll(async () => {
  [redis, pg, sim] = await Promise.all([startRedis(), startPostgres(), startSimulator({ latencyScale: 0 })]);
  db = await pg.createDatabase();
  // Two instances behind one load balancer: Redis and PostgreSQL shared, each with its own registry and its own schedule.
  one = await startGateway({ sim, redisUrl: redis.url, databaseUrl: db });
  two = await startGateway({ sim, redisUrl: redis.url, databaseUrl: db });
  key = (await one.createKey({ rateLimitRpm: 1000 })).key;
}, 120_000);
afterAll(async () => {
  await Promise.all([one, two].map((g) => g?.close()));
  await sim?.close();
  await redis?.stop();
  await pg?.stop();
});

async function providersOf(gw: TestGateway, id: string): Promise<string[] | null> {
  const res = await fetch(`${gw.baseB}/models/${encodeURIComponent(id)}`, { headers: { authorization: `Bearer ${key}` } });
  return res.status === 200 ? ((await res.json()) as { providers: string[] }).providers : null;
}

const pinned = (gw: TestGateway, model: string, provider: string) =>
  fetch(`${gw.baseA}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-gateway-provider': provider },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'x' }] }),
  });

describe('an admin rebuild with instances sharing Redis', () => {
  it('reaches every instance: an offer a provider dropped leaves them all, and returns to them all', async () => {
    const nebius = sim.providers.nebius;
    const before = nebius?.models() ?? [];
    expect(await providersOf(two, 'meta/llama-3.3-70b')).toEqual(['scaleway', 'ovh', 'nebius']);
    nebius?.setModels(before.filter((m) => m !== 'meta-llama/Llama-3.3-70B-Instruct'));
    try {
      expect((await one.admin<{ providers: Record<string, string> }>('POST', '/registry/rebuild')).body.providers.nebius).toBe('ok');
      expect(await providersOf(one, 'meta/llama-3.3-70b')).toEqual(['scaleway', 'ovh']);
      // The other instance no longer routes to the dropped offer, rather than until its own rebuild hours later.
      await eventually(async () => expect(await providersOf(two, 'meta/llama-3.3-70b')).toEqual(['scaleway', 'ovh']), 5_000);
      const chats = nebius?.stats().byEndpoint.chat ?? 0;
      expect((await pinned(two, 'meta/llama-3.3-70b', 'nebius')).status).toBe(400);
      expect(nebius?.stats().byEndpoint.chat ?? 0).toBe(chats);
    } finally {
      nebius?.setModels(before);
    }
    // Asked of the other instance, the rebuild reaches the first one the same way.
    await two.admin('POST', '/registry/rebuild');
    await eventually(async () => expect(await providersOf(one, 'meta/llama-3.3-70b')).toEqual(['scaleway', 'ovh', 'nebius']), 5_000);
    expect((await pinned(one, 'meta/llama-3.3-70b', 'nebius')).status).toBe(200);
  });
});

describe('a model’s created time', () => {
  const createdOf = async (gw: TestGateway) => {
    const res = await fetch(`${gw.baseA}/models`, { headers: { authorization: `Bearer ${key}` } });
    const { data } = (await res.json()) as { data: { id: string; created: number }[] };
    return Object.fromEntries(data.map((m) => [m.id, m.created]));
  };

  it('is the same on every instance sharing the store, and on one started later, as OpenAI’s never changes', async () => {
    const first = await createdOf(one);
    expect(Object.keys(first).length).toBeGreaterThan(5);
    expect(await createdOf(two)).toEqual(first);
    // An instance that first sees the models a few seconds later (a restart, a scale-out) lists the first times.
    const latest = Math.max(...Object.values(first));
    while (Math.floor(Date.now() / 1000) <= latest + 1) await new Promise((r) => setTimeout(r, 100));
    const later = await startGateway({ sim, redisUrl: redis.url, databaseUrl: db });
    try {
      expect(await createdOf(later)).toEqual(first);
    } finally {
      await later.close();
    }
  }, 60_000);
});

describe('a scheduled rebuild with instances sharing Redis', () => {
  it('that reads a changed list has the others read theirs again: instances on other schedules do not route by different lists', async () => {
    // A third instance whose schedule comes round first (instances started at different times): every 2 s here.
    const early = await startGateway({ sim, redisUrl: redis.url, databaseUrl: db, env: { GW_REGISTRY_INTERVAL_S: '2' } });
    const ovh = sim.providers.ovh;
    const before = ovh?.models() ?? [];
    try {
      expect(await providersOf(two, 'meta/llama-3.3-70b')).toEqual(['scaleway', 'ovh', 'nebius']);
      ovh?.setModels(before.filter((m) => m !== 'Meta-Llama-3_3-70B-Instruct'));
      await eventually(async () => expect(await providersOf(early, 'meta/llama-3.3-70b')).toEqual(['scaleway', 'nebius']), 10_000);
      // The instances whose own rebuild is hours away follow within moments, not at it.
      await eventually(async () => expect(await providersOf(two, 'meta/llama-3.3-70b')).toEqual(['scaleway', 'nebius']), 5_000);
      await eventually(async () => expect(await providersOf(one, 'meta/llama-3.3-70b')).toEqual(['scaleway', 'nebius']), 5_000);
      ovh?.setModels(before);
      await eventually(async () => expect(await providersOf(two, 'meta/llama-3.3-70b')).toEqual(['scaleway', 'ovh', 'nebius']), 10_000);
    } finally {
      ovh?.setModels(before);
      await early.close();
    }
  }, 60_000);
});
