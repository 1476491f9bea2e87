import { type RedisServer, startRedis } from '@gw/testkit';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectRedis, FAST_FAIL_OPTIONS } from '../src/kv/redis.js';

let server: RedisServer;
let redis: Redis;

beforeAll(async () => {
  server = await startRedis();
  redis = await connectRedis(server.url, { ...FAST_FAIL_OPTIONS, commandTimeout: 50 });
});

afterAll(async () => {
  redis?.disconnect();
  await server?.stop();
});

describe('the request-path Redis client times commands out, tolerating event-loop stalls', () => {
  it('fails every command to a Redis that does not answer after about the timeout, and answers again once it does', async () => {
    server.pause();
    const started = performance.now();
    const outcomes = await Promise.allSettled([redis.ping(), redis.get('a'), redis.incr('b')]);
    const took = performance.now() - started;
    server.resume();
    expect(outcomes.map((o) => (o.status === 'rejected' ? (o.reason as Error).message : 'ok'))).toEqual([
      'Command timed out',
      'Command timed out',
      'Command timed out',
    ]);
    expect(took).toBeGreaterThanOrEqual(45);
    expect(took).toBeLessThan(1_000);
    await new Promise((r) => setTimeout(r, 100));
    expect(await redis.ping()).toBe('PONG');
  });

  it('does not fail a command whose reply came while the event loop was stalled past the timeout', async () => {
    const pending = redis.set('stalled', '1');
    // Auto-pipelining writes the command in a setImmediate; the stall is queued right after it, so the
    // command is on the wire and its reply arrives during the 150 ms stall, read only after it.
    await new Promise<void>((resolve) =>
      setImmediate(() => {
        const until = performance.now() + 150;
        while (performance.now() < until) {
          // The event loop is held.
        }
        resolve();
      }),
    );
    await expect(pending).resolves.toBe('OK');
    // Commands sent after a timed-out one still time out on their own schedule.
    const many = await Promise.all(Array.from({ length: 200 }, (_, i) => redis.set(`k${i}`, String(i))));
    expect(many.every((r) => r === 'OK')).toBe(true);
  });
});
