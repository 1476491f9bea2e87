import { type RedisServer, startRedis } from '@gw/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll } from 'vitest';

/** A Redis server of the test file's own, started before its tests and stopped after them, and a client on it. */
export function useRedis(): { readonly server: RedisServer; readonly redis: Redis } {
  let server: RedisServer | undefined;
  let redis: Redis | undefined;
  beforeAll(async () => {
    server = await startRedis();
    redis = new Redis(server.url);
  });
  afterAll(async () => {
    redis?.disconnect();
    await server?.stop();
  });
  const started = <T>(value: T | undefined): T => {
    if (value === undefined) throw new Error('Redis is not started yet: use it inside a test or a hook');
    return value;
  };
  return {
    get server() {
      return started(server);
    },
    get redis() {
      return started(redis);
    },
  };
}
