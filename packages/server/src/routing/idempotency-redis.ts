import type { Redis } from 'ioredis';
import { CircuitBreaker } from '../limits/circuit-breaker.js';
import type { IdempotencyBackend, IdempotencyEntry, StoredAnswer } from './idempotency-types.js';

/** One hash per scope, hash-tagged for Redis Cluster. */
const keyOf = (scope: string) => `gw:idem:{${scope}}`;

const CLAIM = `
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.call('HMGET', KEYS[1], 'state', 'fp', 'answer')
end
redis.call('HSET', KEYS[1], 'state', 'pending', 'fp', ARGV[1], 'owner', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return false
`;
const REFRESH = `
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] and redis.call('HGET', KEYS[1], 'state') == 'pending' then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`;
const COMPLETE = `
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'state', 'done', 'answer', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`;
const RELEASE = `
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] and redis.call('HGET', KEYS[1], 'state') == 'pending' then
  return redis.call('DEL', KEYS[1])
end
return 0
`;

type Script = (key: string, ...args: (string | number)[]) => Promise<unknown>;
interface Scripts {
  gwIdemClaim: Script;
  gwIdemRefresh: Script;
  gwIdemComplete: Script;
  gwIdemRelease: Script;
}

/**
 * Idempotency in Redis, shared by every instance: a claim is one atomic
 * script (exists? else take it with an expiry), and the owner-checked
 * scripts refresh, complete or release it. After a failure, calls fail at
 * once for a second instead of each waiting for a timeout.
 */
export class RedisIdempotencyBackend implements IdempotencyBackend {
  private readonly breaker = new CircuitBreaker(1000);

  constructor(private readonly redis: Redis) {
    redis.defineCommand('gwIdemClaim', { numberOfKeys: 1, lua: CLAIM });
    redis.defineCommand('gwIdemRefresh', { numberOfKeys: 1, lua: REFRESH });
    redis.defineCommand('gwIdemComplete', { numberOfKeys: 1, lua: COMPLETE });
    redis.defineCommand('gwIdemRelease', { numberOfKeys: 1, lua: RELEASE });
  }

  async claim(scope: string, fingerprint: string, owner: string, ttlMs: number): Promise<IdempotencyEntry | null> {
    const res = (await this.run('gwIdemClaim', scope, fingerprint, owner, Math.round(ttlMs))) as [string | null, string | null, string | null] | null;
    if (res === null) return null;
    const [state, fp, answer] = res;
    if (state === 'done' && answer !== null) return { state: 'done', fingerprint: fp ?? '', answer: JSON.parse(answer) as StoredAnswer };
    return { state: 'pending', fingerprint: fp ?? '' };
  }

  async refresh(scope: string, owner: string, ttlMs: number): Promise<void> {
    await this.run('gwIdemRefresh', scope, owner, Math.round(ttlMs));
  }

  async complete(scope: string, owner: string, answer: StoredAnswer, ttlMs: number): Promise<void> {
    await this.run('gwIdemComplete', scope, owner, JSON.stringify(answer), Math.round(ttlMs));
  }

  async release(scope: string, owner: string): Promise<void> {
    await this.run('gwIdemRelease', scope, owner);
  }

  private async run(name: keyof Scripts, scope: string, ...args: (string | number)[]): Promise<unknown> {
    if (this.redis.status !== 'ready' || !this.breaker.allow()) throw new Error('Redis is unavailable');
    try {
      const res = await (this.redis as unknown as Scripts)[name].call(this.redis, keyOf(scope), ...args);
      this.breaker.success();
      return res;
    } catch (err) {
      this.breaker.failure();
      throw err;
    }
  }

  async close(): Promise<void> {
    this.redis.disconnect();
  }
}
