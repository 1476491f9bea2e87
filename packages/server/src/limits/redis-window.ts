import type { Redis } from 'ioredis';
import { CircuitBreaker } from './circuit-breaker.js';
import { MemoryWindowLimiter, windowDecision } from './memory-window.js';
import { type LimitDecision, type RateLimiter, WINDOW_MS } from './types.js';

/**
 * SPEC's sliding window as one atomic script over a sorted set per key, so
 * every instance shares one window. Redis's own clock stamps the requests,
 * so instances with skewed clocks still agree. A rejected request is not
 * added. Keys are hash-tagged for Redis Cluster.
 */
// The stamp whose leaving frees a place in the window (KEYS[1]; count, limit, now set): the oldest, unless the key's
// limit was lowered below what its window holds, then the one count - limit places after it.
const FREEING_STAMP = `
local nth = math.max(0, count - limit)
local oldest = redis.call('ZRANGE', KEYS[1], nth, nth, 'WITHSCORES')
local first = now
if oldest[2] then first = tonumber(oldest[2]) end
`;

const SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local count = redis.call('ZCARD', KEYS[1])
local allowed = 0
if count < limit then
  redis.call('ZADD', KEYS[1], now, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], window)
  count = count + 1
  allowed = 1
end
${FREEING_STAMP}
return {allowed, count, first, now}
`;

// The same window, read without counting (KEYS: the window; ARGV: window ms, limit).
const PEEK = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[1]))
local count = redis.call('ZCARD', KEYS[1])
${FREEING_STAMP}
return {count, first, now}
`;

type WindowCommand = (key: string, window: number, limit: number, member: string) => Promise<[number, number, number, number]>;
type PeekCommand = (key: string, window: number, limit: number) => Promise<[number, number, number]>;

export class RedisWindowLimiter implements RateLimiter {
  private readonly breaker = new CircuitBreaker(1000);
  /**
   * What this instance let through while Redis could not be reached: the headers of a request let through unenforced
   * count these rather than claim a fresh window (docs/decisions.md). Made on the first failure.
   */
  private estimate: MemoryWindowLimiter | null = null;

  constructor(
    private readonly redis: Redis,
    private readonly windowMs = WINDOW_MS,
  ) {
    redis.defineCommand('gwSlidingWindow', { numberOfKeys: 1, lua: SCRIPT });
    redis.defineCommand('gwSlidingWindowPeek', { numberOfKeys: 1, lua: PEEK });
  }

  async peek(keyId: string, limit: number): Promise<LimitDecision> {
    if (this.redis.status !== 'ready' || this.breaker.probing || !this.breaker.allow()) return this.failOpen(keyId, limit, false);
    try {
      const run = (this.redis as unknown as { gwSlidingWindowPeek: PeekCommand }).gwSlidingWindowPeek;
      const [count, oldest, now] = await run.call(this.redis, `gw:rl:{${keyId}}`, this.windowMs, limit);
      this.breaker.success();
      return windowDecision(count < limit, count, limit, oldest, now, this.windowMs);
    } catch {
      this.breaker.failure();
      return this.failOpen(keyId, limit, false);
    }
  }

  async hit(keyId: string, limit: number, requestId: string): Promise<LimitDecision> {
    if (this.redis.status !== 'ready') return this.failOpen(keyId, limit, true);
    if (this.breaker.probing) {
      // After a failure, the trial call runs in the background: no request waits on a Redis that may still hang.
      this.breaker.allow();
      void this.run(keyId, limit, requestId, false);
      return this.failOpen(keyId, limit, true);
    }
    if (!this.breaker.allow()) return this.failOpen(keyId, limit, true);
    return this.run(keyId, limit, requestId, true);
  }

  /** Stops the estimate's sweeper. */
  close(): void {
    this.estimate?.close();
  }

  /** `answers`: the decision is the request's (a background trial's is not, and must not count it twice). */
  private async run(keyId: string, limit: number, requestId: string, answers: boolean): Promise<LimitDecision> {
    try {
      const run = (this.redis as unknown as { gwSlidingWindow: WindowCommand }).gwSlidingWindow;
      const [allowed, count, oldest, now] = await run.call(this.redis, `gw:rl:{${keyId}}`, this.windowMs, limit, requestId);
      this.breaker.success();
      return windowDecision(allowed === 1, count, limit, oldest, now, this.windowMs);
    } catch {
      this.breaker.failure();
      return this.failOpen(keyId, limit, answers);
    }
  }

  /**
   * A request let through unenforced (SPEC: fail-open). Its remaining and reset are this instance's own window of
   * such requests, counted when `count` (a hit), since the shared window cannot be read.
   */
  private failOpen(keyId: string, limit: number, count: boolean): LimitDecision {
    this.estimate ??= new MemoryWindowLimiter(Date.now, this.windowMs);
    const d = count ? this.estimate.hitSync(keyId, limit) : this.estimate.peek(keyId, limit);
    d.allowed = true;
    d.enforced = false;
    return d;
  }
}
