import type { Redis } from 'ioredis';
import { type BetaDecision, type BetaQuota, type BetaQuotaLimits, EMBEDDINGS_BETA } from './beta-quota.js';
import { CircuitBreaker } from './circuit-breaker.js';
import { monotonicMs } from './memory-window.js';

/**
 * The beta window as one atomic script, shared by every instance: a
 * sorted set of admitted request ids by time (Redis's own clock) and a
 * hash of their tokens with a running total in field `#sum`, so that an
 * admission costs O(log n) however full the window is (summing the whole
 * window each call made 25 concurrent calls on a full window outlast the
 * command timeout). `admit` drops what aged out, refuses past either
 * allowance (saying how long until enough ages out), else records the
 * request with its estimate; `settle` replaces the estimate with the
 * provider's count. Keys are hash-tagged for Redis Cluster.
 */
const SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[2])
if ARGV[1] == 'settle' then
  local before = redis.call('HGET', KEYS[2], ARGV[5])
  if before then
    redis.call('HSET', KEYS[2], ARGV[5], ARGV[6])
    redis.call('HINCRBY', KEYS[2], '#sum', tonumber(ARGV[6]) - tonumber(before))
  end
  return {1, 0, 0}
end
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - window)
if #old > 0 then
  local gone = redis.call('HMGET', KEYS[2], unpack(old))
  local freed = 0
  for i = 1, #gone do freed = freed + (tonumber(gone[i]) or 0) end
  redis.call('HDEL', KEYS[2], unpack(old))
  redis.call('HINCRBY', KEYS[2], '#sum', -freed)
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
end
local maxReq = tonumber(ARGV[3])
local maxTok = tonumber(ARGV[4])
local est = tonumber(ARGV[6])
local count = redis.call('ZCARD', KEYS[1])
if count >= maxReq then
  -- The request whose leaving frees a place: the oldest, unless requests let through unenforced left more than the allowance.
  local nth = count - maxReq
  local first = redis.call('ZRANGE', KEYS[1], nth, nth, 'WITHSCORES')
  return {0, 1, tonumber(first[2]) + window - now}
end
local used = tonumber(redis.call('HGET', KEYS[2], '#sum') or '0')
if used + est > maxTok then
  -- Refusals only: walk from the oldest until enough would have aged out.
  local freed = 0
  local from = 0
  while from < count do
    local chunk = redis.call('ZRANGE', KEYS[1], from, from + 63, 'WITHSCORES')
    local ids = {}
    for i = 1, #chunk, 2 do ids[#ids + 1] = chunk[i] end
    local toks = redis.call('HMGET', KEYS[2], unpack(ids))
    for i = 1, #toks do
      freed = freed + (tonumber(toks[i]) or 0)
      if used - freed + est <= maxTok then
        return {0, 2, tonumber(chunk[2 * i]) + window - now}
      end
    end
    from = from + 64
  end
  return {0, 2, window}
end
redis.call('ZADD', KEYS[1], now, ARGV[5])
redis.call('HSET', KEYS[2], ARGV[5], est)
redis.call('HINCRBY', KEYS[2], '#sum', est)
redis.call('PEXPIRE', KEYS[1], window)
redis.call('PEXPIRE', KEYS[2], window)
return {1, 0, 0}
`;

// Requests let through while Redis could not be reached, written to the window once it answers (KEYS as above; ARGV:
// window ms, the instance's monotonic clock when sent, then stamp, request id and tokens triples in that clock). A
// stamp is moved to Redis's clock by the difference of the two clocks; one that has aged out is left out. A request
// already there (an admission sent before the outage that Redis ran when it woke) only has its tokens set: never
// counted twice.
const CATCH_UP = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
local shift = now - tonumber(ARGV[2])
for i = 3, #ARGV, 3 do
  local at = tonumber(ARGV[i]) + shift
  local id = ARGV[i + 1]
  local n = tonumber(ARGV[i + 2])
  if at > now - window then
    local before = redis.call('HGET', KEYS[2], id)
    if not before then
      redis.call('ZADD', KEYS[1], math.min(at, now), id)
      before = 0
    end
    redis.call('HSET', KEYS[2], id, n)
    redis.call('HINCRBY', KEYS[2], '#sum', n - tonumber(before))
  end
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], window)
  redis.call('PEXPIRE', KEYS[2], window)
end
return 1
`;

type QuotaCommand = (
  times: string,
  tokens: string,
  mode: string,
  window: number,
  maxReq: number,
  maxTok: number,
  id: string,
  n: number,
) => Promise<[number, number, number]>;

type CatchUpCommand = (times: string, tokens: string, window: number, sentAt: number, ...triples: (number | string)[]) => Promise<number>;

/** A request let through unenforced: its workspace (or key), when (the instance's monotonic clock) and its tokens. */
interface Owed {
  scope: string;
  at: number;
  tokens: number;
}

/** How often an instance that let requests through unenforced tries to write them while Redis is away. */
const CATCH_UP_RETRY_MS = 1000;
const CATCH_UP_BATCH = 1000;

export class RedisBetaQuota implements BetaQuota {
  private readonly breaker = new CircuitBreaker(1000);
  /**
   * The requests let through unenforced in the last window, by request id in the order let through, until they are
   * written to the shared window: until then this instance does not enforce, since the window would not hold them (a
   * workspace let through during an outage would be admitted its whole allowance again). Null when nothing is owed.
   */
  private unwritten: Map<string, Owed> | null = null;
  /** The write of what is owed under way; true once nothing is owed. */
  private catchUpRun: Promise<boolean> | null = null;
  private catchUpTimer: NodeJS.Timeout | null = null;

  constructor(
    private readonly redis: Redis,
    readonly limits: BetaQuotaLimits = EMBEDDINGS_BETA,
  ) {
    redis.defineCommand('gwBetaQuota', { numberOfKeys: 2, lua: SCRIPT });
    redis.defineCommand('gwBetaQuotaCatchUp', { numberOfKeys: 2, lua: CATCH_UP });
    // Written as soon as Redis is back, not at this instance's next request: until then other instances admit against
    // a window that lacks them.
    redis.on('ready', () => void this.caughtUp(true));
  }

  async admit(scope: string, requestId: string, tokens: number): Promise<BetaDecision> {
    if (this.unwritten !== null || this.catchUpRun !== null) {
      // Back from an outage: the request that finds what was let through owed writes it (the breaker's trial, when Redis
      // failed) and is decided on a window that holds it; those that come while the write runs are let through and
      // written next, as the rate limiter does, rather than wait on a Redis that may still hang.
      if (this.catchUpRun !== null || !(await this.caughtUp())) return this.failOpen(scope, requestId, tokens);
    }
    const result = await this.run('admit', scope, requestId, tokens);
    if (result === null) return this.failOpen(scope, requestId, tokens);
    const [allowed, reason, waitMs] = result;
    if (allowed === 1) return { allowed: true, reason: null, waitMs: 0, enforced: true };
    return { allowed: false, reason: reason === 1 ? 'requests' : 'tokens', waitMs, enforced: true };
  }

  async settle(scope: string, requestId: string, tokens: number): Promise<void> {
    const owed = this.unwritten?.get(requestId);
    if (owed !== undefined) {
      owed.tokens = tokens;
      return;
    }
    // One being written is settled after its write: the commands of one connection run in the order sent.
    await this.run('settle', scope, requestId, tokens);
  }

  /** Stops the catch-up's retries. */
  close(): void {
    if (this.catchUpTimer !== null) clearTimeout(this.catchUpTimer);
    this.catchUpTimer = null;
  }

  /** A request let through unenforced (SPEC: fail-open), kept to be written to the shared window once Redis answers. */
  private failOpen(scope: string, requestId: string, tokens: number): BetaDecision {
    const at = monotonicMs();
    this.unwritten ??= new Map();
    dropAged(this.unwritten, at - this.limits.windowMs);
    this.unwritten.set(requestId, { scope, at, tokens });
    this.retryCatchUpLater();
    return { allowed: true, reason: null, waitMs: 0, enforced: false };
  }

  /** Writes what is owed (one write at a time); true once nothing is owed. */
  private caughtUp(answered = false): Promise<boolean> {
    this.catchUpRun ??= this.catchUp(answered).finally(() => {
      this.catchUpRun = null;
    });
    return this.catchUpRun;
  }

  /**
   * Writes the requests let through unenforced to the shared window, one script call per scope (and batch), all sent
   * together. While Redis is away, retried every {@link CATCH_UP_RETRY_MS}. `answered`: Redis has just answered (a
   * new connection), so its breaker is not asked.
   */
  private async catchUp(answered: boolean): Promise<boolean> {
    const owed = this.unwritten;
    if (owed === null) return true;
    if (this.redis.status !== 'ready' || !(answered || this.breaker.allow())) {
      this.retryCatchUpLater();
      return false;
    }
    this.unwritten = null;
    const sentAt = monotonicMs();
    dropAged(owed, sentAt - this.limits.windowMs);
    const byScope = new Map<string, (number | string)[]>();
    const calls: [string, (number | string)[]][] = [];
    for (const [id, o] of owed) {
      let args = byScope.get(o.scope);
      if (args === undefined || args.length >= CATCH_UP_BATCH * 3) {
        args = [];
        byScope.set(o.scope, args);
        calls.push([o.scope, args]);
      }
      args.push(o.at, id, o.tokens);
    }
    try {
      const write = (this.redis as unknown as { gwBetaQuotaCatchUp: CatchUpCommand }).gwBetaQuotaCatchUp;
      const windowMs = this.limits.windowMs;
      await Promise.all(calls.map(([scope, args]) => write.call(this.redis, `gw:beta:{${scope}}:t`, `gw:beta:{${scope}}:n`, windowMs, sentAt, ...args)));
      this.breaker.success();
    } catch {
      this.breaker.failure();
      // Still owed, before any let through meanwhile (an admission sent before the write began, which failed too).
      const meanwhile = this.unwritten as Map<string, Owed> | null;
      for (const [id, o] of meanwhile ?? []) owed.set(id, o);
      this.unwritten = owed.size > 0 ? owed : null;
    }
    this.retryCatchUpLater();
    return this.unwritten === null;
  }

  private retryCatchUpLater(): void {
    if (this.unwritten === null || this.catchUpTimer !== null) return;
    this.catchUpTimer = setTimeout(() => {
      this.catchUpTimer = null;
      void this.caughtUp();
    }, CATCH_UP_RETRY_MS);
    this.catchUpTimer.unref();
  }

  /** null when Redis is unreachable or paused: the caller fails open, as the rate limiter does. */
  private async run(mode: 'admit' | 'settle', scope: string, requestId: string, tokens: number): Promise<[number, number, number] | null> {
    if (this.redis.status !== 'ready' || !this.breaker.allow()) return null;
    try {
      const command = (this.redis as unknown as { gwBetaQuota: QuotaCommand }).gwBetaQuota;
      const { requests, tokens: maxTokens, windowMs } = this.limits;
      const result = await command.call(this.redis, `gw:beta:{${scope}}:t`, `gw:beta:{${scope}}:n`, mode, windowMs, requests, maxTokens, requestId, tokens);
      this.breaker.success();
      return result;
    } catch {
      this.breaker.failure();
      return null;
    }
  }
}

/** Forgets the requests let through at or before `cutoff` (aged out of the window); they are in the order let through. */
function dropAged(owed: Map<string, Owed>, cutoff: number): void {
  for (const [id, o] of owed) {
    if (o.at > cutoff) return;
    owed.delete(id);
  }
}
