import type { Redis } from 'ioredis';
import { type BudgetLedger, type BudgetScope, fromNano, RESERVATION_TTL_MS, type Reservation, type ReserveResult, toNano } from './budget-types.js';

// KEYS: per scope, its spent string then its holds sorted set. ARGV: nano, request id, hold ttl ms, then a limit per scope (-1: none).
// Returns 0 (held), i (scope i refused) or -i (scope i not loaded yet: call again with its spent).
const RESERVE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local nano = tonumber(ARGV[1])
local n = #KEYS / 2
for i = 1, n do
  local spent = redis.call('GET', KEYS[2*i-1])
  if not spent then return -i end
  local limit = tonumber(ARGV[3+i])
  if limit >= 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[2*i], '-inf', now)
    local held = 0
    for _, m in ipairs(redis.call('ZRANGE', KEYS[2*i], 0, -1)) do
      held = held + tonumber(string.match(m, ':(%d+)$'))
    end
    if tonumber(spent) >= limit or tonumber(spent) + held + nano > limit then return i end
  end
end
for i = 1, n do
  redis.call('ZADD', KEYS[2*i], now + tonumber(ARGV[3]), ARGV[2] .. ':' .. ARGV[1])
  redis.call('PEXPIRE', KEYS[2*i], tonumber(ARGV[3]))
end
return 0
`;

// KEYS: per scope, spent then holds. ARGV: hold member, actual nano (0 to release).
const SETTLE = `
for i = 1, #KEYS / 2 do
  if redis.call('ZREM', KEYS[2*i], ARGV[1]) == 1 and tonumber(ARGV[2]) > 0 and redis.call('EXISTS', KEYS[2*i-1]) == 1 then
    redis.call('INCRBY', KEYS[2*i-1], ARGV[2])
  end
end
return 0
`;

type Cmd = (...args: (string | number)[]) => Promise<number>;

/**
 * The budget ledger in Redis, shared by every instance. Spent totals are
 * loaded from the store the first time a scope is met (and again after a
 * Redis restart); holds expire on their own if their instance dies.
 */
export class RedisLedger implements BudgetLedger {
  constructor(private readonly redis: Redis) {
    redis.defineCommand('gwBudgetReserve', { lua: RESERVE });
    redis.defineCommand('gwBudgetSettle', { lua: SETTLE });
  }

  async reserve(tag: string, scopes: BudgetScope[], eur: number, requestId: string): Promise<ReserveResult> {
    const nano = toNano(eur);
    const keys = scopes.flatMap((s) => keysOf(tag, s.id));
    const limits = scopes.map((s) => (s.limit === null ? -1 : toNano(s.limit)));
    for (let attempt = 0; attempt < 3; attempt++) {
      const res = await this.cmd('gwBudgetReserve')(keys.length, ...keys, nano, requestId, RESERVATION_TTL_MS, ...limits);
      if (res === 0) return { ok: true, reservation: { id: `${requestId}:${nano}`, nano, scopes: scopes.map((s) => s.id), tag } };
      if (res > 0) return { ok: false, scope: (scopes[res - 1] as BudgetScope).id };
      const scope = scopes[-res - 1] as BudgetScope;
      await this.redis.set(keysOf(tag, scope.id)[0] as string, String(toNano(await scope.loadSpent())), 'NX');
    }
    throw new Error('budget ledger could not load its totals');
  }

  async settle(r: Reservation, actualEur: number): Promise<void> {
    const keys = r.scopes.flatMap((id) => keysOf(r.tag, id));
    await this.cmd('gwBudgetSettle')(keys.length, ...keys, r.id, toNano(actualEur));
  }

  async release(r: Reservation): Promise<void> {
    await this.settle(r, 0);
  }

  async peek(tag: string, scopeId: string): Promise<{ spent: number; reserved: number } | null> {
    const [spentKey, holdsKey] = keysOf(tag, scopeId) as [string, string];
    const spent = await this.redis.get(spentKey);
    if (spent === null) return null;
    const holds = await this.redis.zrangebyscore(holdsKey, Date.now(), '+inf');
    const reserved = holds.reduce((sum, m) => sum + Number(m.slice(m.lastIndexOf(':') + 1)), 0);
    return { spent: fromNano(Number(spent)), reserved: fromNano(reserved) };
  }

  private cmd(name: string): Cmd {
    const fn = (this.redis as unknown as Record<string, Cmd>)[name] as Cmd;
    return fn.bind(this.redis);
  }
}

/** The scopes of one request share a hash tag, so the script's keys sit in one Cluster slot. */
function keysOf(tag: string, scopeId: string): [string, string] {
  return [`gw:budget:{${tag}}:${scopeId}:spent`, `gw:budget:{${tag}}:${scopeId}:holds`];
}
