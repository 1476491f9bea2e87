import type { Redis } from 'ioredis';
import { CircuitBreaker } from './circuit-breaker.js';
import { MemoryWindowLimiter, monotonicMs, windowDecision } from './memory-window.js';
import { type LimitDecision, type RateLimiter, WINDOW_MS } from './types.js';
import { UnenforcedLog } from './unenforced-log.js';

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

// Requests let through while Redis could not be reached, written to the window once it answers (KEYS: the window;
// ARGV: window ms, the instance's monotonic clock when sent, then stamp and request id pairs in that clock). A stamp is moved
// to Redis's clock by the difference of the two clocks; one that has aged out is left out. A request id already
// there (a count sent before the outage and run when Redis woke) is only moved to its stamp: never counted twice.
const CATCH_UP = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
local shift = now - tonumber(ARGV[2])
for i = 3, #ARGV, 2 do
  local at = tonumber(ARGV[i]) + shift
  if at > now - window then redis.call('ZADD', KEYS[1], math.min(at, now), ARGV[i + 1]) end
end
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('PEXPIRE', KEYS[1], window) end
return 1
`;

type WindowCommand = (key: string, window: number, limit: number, member: string) => Promise<[number, number, number, number]>;
type PeekCommand = (key: string, window: number, limit: number) => Promise<[number, number, number]>;
type CatchUpCommand = (key: string, window: number, sentAt: number, ...stampsAndIds: (number | string)[]) => Promise<number>;

/** How often an instance that let requests through unenforced tries to write them while Redis is away. */
const CATCH_UP_RETRY_MS = 1000;
const CATCH_UP_BATCH = 1000;

export class RedisWindowLimiter implements RateLimiter {
  private readonly breaker = new CircuitBreaker(1000);
  /**
   * What this instance let through while Redis could not be reached: the headers of a request let through unenforced
   * count these rather than claim a fresh window (docs/decisions.md). Made on the first failure.
   */
  private estimate: MemoryWindowLimiter | null = null;
  /**
   * The requests let through unenforced in the last window, until they are written to the shared window: until then
   * this instance does not enforce, since the window would not hold them (a client let through during an outage
   * would be admitted the whole limit again). Null when nothing is owed.
   */
  private unwritten: UnenforcedLog | null = null;
  private catchingUp = false;
  private catchUpTimer: NodeJS.Timeout | null = null;

  constructor(
    private readonly redis: Redis,
    private readonly windowMs = WINDOW_MS,
  ) {
    redis.defineCommand('gwSlidingWindow', { numberOfKeys: 1, lua: SCRIPT });
    redis.defineCommand('gwSlidingWindowPeek', { numberOfKeys: 1, lua: PEEK });
    redis.defineCommand('gwSlidingWindowCatchUp', { numberOfKeys: 1, lua: CATCH_UP });
    // Every instance writes what it let through as soon as Redis is back, not at its next request: until all have,
    // the window lacks some, and a request another instance decides could be admitted over the limit.
    // A connection just made ready has had its answer: the breaker, open from the outage, need not be waited for.
    redis.on('ready', () => void this.catchUp(true));
  }

  async peek(keyId: string, limit: number): Promise<LimitDecision> {
    if (this.redis.status !== 'ready' || this.unwritten !== null || this.breaker.probing || !this.breaker.allow()) return this.failOpen(keyId, limit, null);
    try {
      const run = (this.redis as unknown as { gwSlidingWindowPeek: PeekCommand }).gwSlidingWindowPeek;
      const [count, oldest, now] = await run.call(this.redis, `gw:rl:{${keyId}}`, this.windowMs, limit);
      this.breaker.success();
      return windowDecision(count < limit, count, limit, oldest, now, this.windowMs);
    } catch {
      this.breaker.failure();
      return this.failOpen(keyId, limit, null);
    }
  }

  async hit(keyId: string, limit: number, requestId: string): Promise<LimitDecision> {
    if (this.redis.status !== 'ready') return this.failOpen(keyId, limit, requestId);
    if (this.unwritten !== null) {
      // Back from an outage: what was let through is written first (the write is the trial call), in the background.
      void this.catchUp();
      return this.failOpen(keyId, limit, requestId);
    }
    if (this.breaker.probing) {
      // After a failure, the trial call runs in the background: no request waits on a Redis that may still hang.
      this.breaker.allow();
      void this.run(keyId, limit, requestId, false);
      return this.failOpen(keyId, limit, requestId);
    }
    if (!this.breaker.allow()) return this.failOpen(keyId, limit, requestId);
    return this.run(keyId, limit, requestId, true);
  }

  /** Stops the estimate's sweeper and the catch-up's retries. */
  close(): void {
    this.estimate?.close();
    if (this.catchUpTimer !== null) clearTimeout(this.catchUpTimer);
    this.catchUpTimer = null;
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
      // A background trial's request was let through and kept by the hit that started it.
      return this.failOpen(keyId, limit, answers ? requestId : null);
    }
  }

  /**
   * Writes the requests let through unenforced to the shared window, one script call per key, all sent together.
   * One at a time; while Redis is away, retried every {@link CATCH_UP_RETRY_MS}. Requests let through while it runs
   * are kept for the next round. `answered`: Redis has just answered (a new connection), so its breaker is not asked.
   */
  private async catchUp(answered = false): Promise<void> {
    const log = this.unwritten;
    if (log === null || this.catchingUp || this.redis.status !== 'ready' || !(answered || this.breaker.allow())) return this.retryCatchUpLater();
    this.catchingUp = true;
    // The instance's clock here is only ever taken from itself (sentAt - at): monotonic, as a step must not move stamps.
    const sentAt = monotonicMs();
    this.dropAged(sentAt);
    const sent = log.end;
    // Per key, in calls of at most CATCH_UP_BATCH requests (a busy key's outage can hold a great many).
    const byKey = new Map<string, (number | string)[]>();
    const calls: [string, (number | string)[]][] = [];
    for (let i = log.first; i < sent; i++) {
      const keyId = log.keyIdAt(i);
      let args = byKey.get(keyId);
      if (args === undefined || args.length >= CATCH_UP_BATCH * 2) {
        args = [];
        byKey.set(keyId, args);
        calls.push([keyId, args]);
      }
      args.push(log.atAt(i), log.requestIdAt(i));
    }
    try {
      const write = (this.redis as unknown as { gwSlidingWindowCatchUp: CatchUpCommand }).gwSlidingWindowCatchUp;
      await Promise.all(calls.map(([keyId, args]) => write.call(this.redis, `gw:rl:{${keyId}}`, this.windowMs, sentAt, ...args)));
      this.breaker.success();
      log.writtenTo(sent);
      if (log.empty) this.unwritten = null;
    } catch {
      this.breaker.failure();
    } finally {
      this.catchingUp = false;
    }
    if (this.unwritten !== null) this.retryCatchUpLater();
  }

  private retryCatchUpLater(): void {
    if (this.unwritten === null || this.catchUpTimer !== null) return;
    this.catchUpTimer = setTimeout(() => {
      this.catchUpTimer = null;
      void this.catchUp();
    }, CATCH_UP_RETRY_MS);
    this.catchUpTimer.unref();
  }

  /** Forgets the requests let through more than a window ago: the shared window would not hold them any more. */
  private dropAged(now: number): void {
    const log = this.unwritten;
    if (log === null) return;
    log.dropThrough(now - this.windowMs);
    log.compact();
  }

  /**
   * A request let through unenforced (SPEC: fail-open). Its remaining and reset are this instance's own window of
   * such requests, counted when it is a hit (`requestId`), since the shared window cannot be read; a hit is kept to
   * be written to the shared window once Redis answers.
   */
  private failOpen(keyId: string, limit: number, requestId: string | null): LimitDecision {
    this.estimate ??= new MemoryWindowLimiter(monotonicMs, this.windowMs);
    if (requestId !== null) {
      const at = monotonicMs();
      if (this.unwritten === null) this.unwritten = new UnenforcedLog();
      else if (!this.catchingUp) this.dropAged(at);
      this.unwritten.push(keyId, at, requestId);
      this.retryCatchUpLater();
    }
    const d = requestId !== null ? this.estimate.hitSync(keyId, limit) : this.estimate.peek(keyId, limit);
    d.allowed = true;
    d.enforced = false;
    return d;
  }
}
