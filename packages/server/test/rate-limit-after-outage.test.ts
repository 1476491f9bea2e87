import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, type RedisServer, startPostgres, startRedis } from '@gw/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';

// Requests let through unenforced while Redis was away are written to the shared window once it answers again.
let redis: RedisServer;
let pg: PostgresServer;
let sim: Simulator;
let one: TestGateway;
let two: TestGateway;

beforeAll(async () => {
  [redis, pg, sim] = await Promise.all([startRedis(), startPostgres(), startSimulator({ latencyScale: 0 })]);
  const databaseUrl = await pg.createDatabase();
  one = await startGateway({ sim, redisUrl: redis.url, databaseUrl });
  two = await startGateway({ sim, redisUrl: redis.url, databaseUrl });
}, 60_000);

afterAll(async () => {
  await Promise.all([one?.close(), two?.close()]);
  await sim?.close();
  await redis?.stop();
  await pg?.stop();
});

const body = JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'count me' }], max_tokens: 5 });
async function chat(base: string, key: string) {
  const res = await fetch(`${base}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body,
  });
  await res.arrayBuffer();
  return {
    status: res.status,
    enforced: res.headers.get('x-ratelimit-enforced'),
    remaining: res.headers.get('x-ratelimit-remaining'),
    retryAfter: Number(res.headers.get('retry-after')),
  };
}

/**
 * After Redis is back, asks both instances in turn until each answers enforced again, then a few more times; returns
 * every enforced answer. Requests still let through meanwhile count too.
 */
async function afterRecovery(key: string): Promise<Awaited<ReturnType<typeof chat>>[]> {
  const enforced: Awaited<ReturnType<typeof chat>>[] = [];
  const until = Date.now() + 10_000;
  for (let i = 0; enforced.length < 6; i++) {
    if (Date.now() > until) throw new Error(`still unenforced: ${JSON.stringify(enforced)}`);
    const answer = await chat(i % 2 === 0 ? one.baseA : two.baseB, key);
    if (answer.enforced === 'true') enforced.push(answer);
    else await new Promise((r) => setTimeout(r, 100));
  }
  return enforced;
}

describe('the window after the limiter failed open', () => {
  it('holds what was let through while Redis was paused: a full window refuses on every instance once enforced again', async () => {
    const { key } = await one.createKey({ rateLimitRpm: 20 });
    for (let i = 0; i < 4; i++) expect((await chat(one.baseA, key)).enforced).toBe('true');
    const started = Date.now();
    redis.pause();
    try {
      // Enough requests in a row on each instance that both take Redis for gone (the connection is dropped).
      const unenforced = await Promise.all(Array.from({ length: 8 }, (_, i) => chat(i % 2 === 0 ? one.baseA : two.baseB, key)));
      // Sent before the connection was dropped, these reach Redis when it wakes; the next are let through without it.
      for (let i = 0; i < 10; i++) unenforced.push(await chat(i % 2 === 0 ? one.baseA : two.baseB, key));
      expect(unenforced.map((a) => `${a.status} ${a.enforced}`)).toEqual(Array(18).fill('200 false'));
    } finally {
      redis.resume();
    }
    const enforced = await afterRecovery(key);
    // 22 requests in the last minute, 20 allowed: every enforced answer is a refusal, until the first ones age out.
    expect(enforced.map((a) => a.status)).toEqual(Array(6).fill(429));
    for (const a of enforced) expect(a.retryAfter).toBeGreaterThanOrEqual(60 - Math.floor((Date.now() - started) / 1000) - 1);
  }, 30_000);

  it('holds what was let through while Redis was down, in the Redis that restarted empty', async () => {
    const { key } = await one.createKey({ rateLimitRpm: 6 });
    await redis.kill();
    const started = Date.now();
    try {
      const unenforced = [];
      for (let i = 0; i < 8; i++) unenforced.push(await chat(i % 2 === 0 ? one.baseA : two.baseB, key));
      expect(unenforced.map((a) => `${a.status} ${a.enforced}`)).toEqual(Array(8).fill('200 false'));
    } finally {
      await redis.restart();
    }
    const enforced = await afterRecovery(key);
    expect(enforced.map((a) => [a.status, a.remaining])).toEqual(Array(6).fill([429, '0']));
    // The window frees when the third of the eight leaves (8 - 6 + 1 = 3 must go for one to fit): about 60 s after it.
    for (const a of enforced) expect(a.retryAfter).toBeGreaterThanOrEqual(60 - Math.floor((Date.now() - started) / 1000) - 1);
  }, 30_000);
});
