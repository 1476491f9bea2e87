import type { Redis } from 'ioredis';
import { type BetaDecision, type BetaQuota, type BetaQuotaLimits, EMBEDDINGS_BETA } from './beta-quota.js';
import { CircuitBreaker } from './circuit-breaker.js';

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
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
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

export class RedisBetaQuota implements BetaQuota {
  private readonly breaker = new CircuitBreaker(1000);

  constructor(
    private readonly redis: Redis,
    readonly limits: BetaQuotaLimits = EMBEDDINGS_BETA,
  ) {
    redis.defineCommand('gwBetaQuota', { numberOfKeys: 2, lua: SCRIPT });
  }

  async admit(scope: string, requestId: string, tokens: number): Promise<BetaDecision> {
    const result = await this.run('admit', scope, requestId, tokens);
    if (result === null) return { allowed: true, reason: null, waitMs: 0, enforced: false };
    const [allowed, reason, waitMs] = result;
    if (allowed === 1) return { allowed: true, reason: null, waitMs: 0, enforced: true };
    return { allowed: false, reason: reason === 1 ? 'requests' : 'tokens', waitMs, enforced: true };
  }

  async settle(scope: string, requestId: string, tokens: number): Promise<void> {
    await this.run('settle', scope, requestId, tokens);
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
