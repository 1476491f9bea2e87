import { type RedisServer, startRedis } from '@gw/testkit';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectRedis } from '../src/kv/redis.js';
import { collectGarbage } from '../src/lib/collect-garbage.js';
import { RedisIdempotencyBackend } from '../src/routing/idempotency-redis.js';
import type { StoredAnswer } from '../src/routing/idempotency-types.js';

let server: RedisServer;
let redis: Redis;

beforeAll(async () => {
  server = await startRedis();
  redis = await connectRedis(server.url);
});

afterAll(async () => {
  redis?.disconnect();
  await server?.stop();
});

/** Claims a key and stores a 10 KB answer for it, as a keyed request that ended does; the answer is only watched from here. */
async function storeAnswer(backend: RedisIdempotencyBackend, i: number): Promise<WeakRef<StoredAnswer>> {
  const scope = `key_test:${i}`;
  expect(await backend.claim(scope, 'fp', `owner-${i}`, 60_000)).toBeNull();
  const answer: StoredAnswer = { status: 200, headers: { 'content-type': 'application/json' }, body: `{"n":${i},"pad":"${'x'.repeat(10_000)}"}` };
  await backend.complete(scope, `owner-${i}`, answer, 60_000);
  return new WeakRef(answer);
}

describe('the Redis idempotency backend keeps no answer it has stored', () => {
  it('lets go of each answer once Redis has it, rather than 15 minutes later (a soak held every keyed answer that long)', async () => {
    const backend = new RedisIdempotencyBackend(redis);
    const stored: WeakRef<StoredAnswer>[] = [];
    for (let i = 0; i < 20; i++) stored.push(await storeAnswer(backend, i));
    // A repeat gets the answer from Redis: it was stored.
    expect(await backend.claim('key_test:3', 'fp', 'owner-again', 60_000)).toMatchObject({ state: 'done', answer: { status: 200 } });
    await new Promise((r) => setTimeout(r, 0));
    expect(collectGarbage()).toBe(true);
    expect(stored.filter((ref) => ref.deref() !== undefined).length).toBe(0);
  });
});
