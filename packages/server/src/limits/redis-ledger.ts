import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { ALIVE_EVERY_MS, ALIVE_TTL_MS, type InstancePresence, instanceKey } from '../kv/instance-presence.js';
import { redisDataLife } from '../kv/redis-data-life.js';
import { hiddenSlot } from '../lib/hidden-slot.js';
import {
  type BudgetLedger,
  type BudgetScope,
  fromNano,
  lastCostsStoredAfterMs,
  limitNano,
  RECONCILING,
  RESERVATION_TTL_MS,
  type Reservation,
  type ReserveResult,
  toNano,
} from './budget-types.js';

// Per scope four keys: its spent total, its holds (sorted set, member "<request>@<instance>:<nano>", score: expiry),
// the running sum of those holds, so that a reservation does not walk every hold in flight
// (with 1,000 streams open that walk was 1,000 string matches inside Redis per request), and the run id of the Redis
// that loaded the total. A total of another run came back from a snapshot after a restart: it lacks what was spent
// after the snapshot, and its holds are of requests long ended, so it is loaded again from the store as a missing one.
// A sum key that is missing while holds exist (older data, eviction) is rebuilt from the holds.
const HELD_SUM = `
local function amount(m) return tonumber(string.match(m, ':(%d+)$')) end
local function heldSum(holds, sumKey, now)
  local sum = redis.call('GET', sumKey)
  local expired = redis.call('ZRANGEBYSCORE', holds, '-inf', now)
  if #expired > 0 then redis.call('ZREMRANGEBYSCORE', holds, '-inf', now) end
  if sum and redis.call('EXISTS', holds) == 0 then
    -- No hold left at all (a sum can only outlive them by eviction): nothing is held.
    redis.call('DEL', sumKey)
    return 0
  end
  if sum then
    sum = tonumber(sum)
    for _, m in ipairs(expired) do sum = sum - amount(m) end
    if #expired > 0 then redis.call('SET', sumKey, sum, 'KEEPTTL') end
    return sum
  end
  sum = 0
  for _, m in ipairs(redis.call('ZRANGE', holds, 0, -1)) do sum = sum + amount(m) end
  local ttl = redis.call('PTTL', holds)
  if ttl > 0 then redis.call('SET', sumKey, sum, 'PX', ttl) end
  return sum
end
`;

// KEYS: per scope, spent, holds, held sum, run; then the reconciliation marker. ARGV: nano, request id, hold
// ttl ms, run id, then a limit per scope (-1: none). Returns 0 (held), i (scope i refused), -i (scope i not loaded in
// this run: call again with its spent), or 'reconciling': an instance is still adding costs it settled in the
// database's leases while Redis was away, which these totals lack; nothing is held.
const RESERVE = `${HELD_SUM}
if redis.call('EXISTS', KEYS[#KEYS]) == 1 then return 'reconciling' end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local nano = tonumber(ARGV[1])
local n = (#KEYS - 1) / 4
for i = 1, n do
  local spent = redis.call('GET', KEYS[4*i-3])
  if not spent or redis.call('GET', KEYS[4*i]) ~= ARGV[4] then return -i end
  local held = heldSum(KEYS[4*i-2], KEYS[4*i-1], now)
  local limit = tonumber(ARGV[4+i])
  if limit >= 0 and (tonumber(spent) >= limit or tonumber(spent) + held + nano > limit) then return i end
end
for i = 1, n do
  redis.call('ZADD', KEYS[4*i-2], now + tonumber(ARGV[3]), ARGV[2] .. ':' .. ARGV[1])
  redis.call('PEXPIRE', KEYS[4*i-2], tonumber(ARGV[3]))
  redis.call('INCRBY', KEYS[4*i-1], nano)
  redis.call('PEXPIRE', KEYS[4*i-1], tonumber(ARGV[3]))
end
return 0
`;

// KEYS: per scope, spent, holds, held sum, run. ARGV: run id, then pairs of hold member and actual nano (0 to release),
// one pair per settled request: the settles of one turn of the event loop that share their scopes go as one call.
// Returns, per pair, 1 if a hold was found (its cost added), else 0 (a restart or an expiry took it: nothing added).
// A scope of another run is left alone: it is loaded again from the store, and its holds with it are let go.
const SETTLE = `
local found = {}
local current = {}
for i = 1, #KEYS / 4 do current[i] = redis.call('GET', KEYS[4*i]) == ARGV[1] end
for j = 2, #ARGV, 2 do
  local member = ARGV[j]
  local actual = tonumber(ARGV[j+1])
  local held = tonumber(string.match(member, ':(%d+)$'))
  found[#found + 1] = 0
  for i = 1, #KEYS / 4 do
    if current[i] and redis.call('ZREM', KEYS[4*i-2], member) == 1 then
      found[#found] = 1
      if redis.call('EXISTS', KEYS[4*i-1]) == 1 then redis.call('DECRBY', KEYS[4*i-1], held) end
      if actual > 0 and redis.call('EXISTS', KEYS[4*i-3]) == 1 then
        redis.call('INCRBY', KEYS[4*i-3], actual)
      end
    end
  end
end
return found
`;

// KEYS: per scope, spent, holds, held sum, run, from-store. ARGV: run id, hold member, actual nano, ms since the settle
// was first sent (and a margin). A settle that did not reach Redis then, sent again: as SETTLE, but a total that took
// the store's value since (raised or loaded) may have its cost already, once its usage record was written; its cost
// is not added there, and the scope's index is returned, for the caller to raise it to the store's instead.
// Returns {1 if the hold was found (else nothing was done), indexes of the scopes to raise}.
const SETTLE_LATE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local member = ARGV[2]
local actual = tonumber(ARGV[3])
local held = tonumber(string.match(member, ':(%d+)$'))
local found = 0
local toRaise = {}
for i = 1, #KEYS / 5 do
  local k = 5 * (i - 1)
  if redis.call('GET', KEYS[k+4]) == ARGV[1] and redis.call('ZREM', KEYS[k+2], member) == 1 then
    found = 1
    if redis.call('EXISTS', KEYS[k+3]) == 1 then redis.call('DECRBY', KEYS[k+3], held) end
    local at = redis.call('GET', KEYS[k+5])
    if at and now - tonumber(at) <= tonumber(ARGV[4]) then toRaise[#toRaise + 1] = i
    elseif actual > 0 and redis.call('EXISTS', KEYS[k+1]) == 1 then redis.call('INCRBY', KEYS[k+1], actual) end
  end
end
return {found, toRaise}
`;

// KEYS: per scope, holds, held sum. ARGV: a hold's member, its new life (ms). A running request's hold lives that long
// from now, in every scope that still has it (its holds and their sum with it). Returns how many scopes had it.
const RENEW = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local found = 0
for i = 1, #KEYS, 2 do
  if redis.call('ZSCORE', KEYS[i], ARGV[1]) then
    redis.call('ZADD', KEYS[i], now + ttl, ARGV[1])
    found = found + 1
    redis.call('PEXPIRE', KEYS[i], ttl)
    if redis.call('EXISTS', KEYS[i+1]) == 1 then redis.call('PEXPIRE', KEYS[i+1], ttl) end
  end
end
return found
`;

/**
 * How long Redis remembers when a total last took the store's value: the longest an instance may owe costs it settled
 * on the leases (cut off from Redis) and still tell whether that total may have them. Past it they are added.
 */
const FROM_STORE_MS = 600_000;

// When a total last took the store's value (a load, or a raise that raised it), in Redis's ms: costs an instance
// settled on the leases before then may be in it already (see ADD_SPENT). Kept FROM_STORE_MS.
const NOTE_FROM_STORE = `
local function noteFromStore(key)
  local t = redis.call('TIME')
  redis.call('SET', key, tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), 'PX', ${FROM_STORE_MS})
end
`;

// KEYS: a spent key, its run key, its from-store key. ARGV: the store's total, nano, run id. The higher of the two
// stays; a missing total (or one of another run) stays as it is, to be loaded.
const RAISE_SPENT = `${NOTE_FROM_STORE}
local have = redis.call('GET', KEYS[1])
if have and redis.call('GET', KEYS[2]) == ARGV[2] and tonumber(have) < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
  noteFromStore(KEYS[3])
end
return 0
`;

// KEYS: triples of spent key, run key, from-store key. ARGV: nano, run id, ms since the first of those costs was
// settled (and a margin). Costs settled elsewhere while Redis was away. A total not loaded in this run (none, or one
// of another run) will be read from the store, which has them only once their usage records are written; a total
// that took the store's value since they were settled (loaded, or raised by an instance after a restart) may have
// them already. Either is left alone and its index returned, for the caller to write its records and raise it to the
// store's instead (the higher of the two stays: never twice).
const ADD_SPENT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local toRaise = {}
for i = 1, #KEYS, 3 do
  local at = redis.call('GET', KEYS[i+2])
  if redis.call('EXISTS', KEYS[i]) == 0 or redis.call('GET', KEYS[i+1]) ~= ARGV[2] or (at and now - tonumber(at) <= tonumber(ARGV[3])) then
    toRaise[#toRaise + 1] = (i + 2) / 3
  else redis.call('INCRBY', KEYS[i], ARGV[1]) end
end
return toRaise
`;

// KEYS: spent, holds, held sum, run, from-store of one scope. ARGV: the store's total, room leased in the database, how long those
// leases live (ms), run id. Loads a total Redis does not hold in this run (one of another run goes, and its holds with
// it); the one call that loads it also holds the leased room (a hold with no instance in its name, never taken for a
// dead one's), until those leases lapse: instances still on the database's leases (Redis came back, they have not
// seen it yet) admit from that room, which Redis must not admit too.
const LOAD_SPENT = `${NOTE_FROM_STORE}
if redis.call('GET', KEYS[4]) == ARGV[4] then
  if not redis.call('SET', KEYS[1], ARGV[1], 'NX') then return 0 end
else
  redis.call('DEL', KEYS[2], KEYS[3])
  redis.call('SET', KEYS[1], ARGV[1])
  redis.call('SET', KEYS[4], ARGV[4])
end
noteFromStore(KEYS[5])
local leased = tonumber(ARGV[2])
local ms = tonumber(ARGV[3])
if leased <= 0 or ms <= 0 then return 1 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[2], now + ms, 'leased-in-database-' .. now .. ':' .. leased)
if redis.call('PTTL', KEYS[2]) < ms then redis.call('PEXPIRE', KEYS[2], ms) end
if redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('INCRBY', KEYS[3], leased)
  if redis.call('PTTL', KEYS[3]) < ms then redis.call('PEXPIRE', KEYS[3], ms) end
end
return 1
`;

// KEYS: per scope, spent, holds, held sum, run. ARGV: hold member, nano, hold ttl ms, run id. The hold of a request
// another ledger admitted (the database's leases, while Redis was away) and still running, taken in whatever the
// budget has left (the request runs either way), so that what Redis admits after it leaves its room. Only if every
// scope's total is loaded in this run (else none: a total loaded later holds the leases' room). 1 if held, else 0.
const ADOPT_HOLD = `${HELD_SUM}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = #KEYS / 4
for i = 1, n do
  if redis.call('EXISTS', KEYS[4*i-3]) == 0 or redis.call('GET', KEYS[4*i]) ~= ARGV[4] then return 0 end
end
for i = 1, n do
  heldSum(KEYS[4*i-2], KEYS[4*i-1], now)
  redis.call('ZADD', KEYS[4*i-2], now + tonumber(ARGV[3]), ARGV[1])
  redis.call('PEXPIRE', KEYS[4*i-2], tonumber(ARGV[3]))
  redis.call('INCRBY', KEYS[4*i-1], ARGV[2])
  redis.call('PEXPIRE', KEYS[4*i-1], tonumber(ARGV[3]))
end
return 1
`;

// KEYS: spent, holds. What a scope has spent and the holds still live, judged on Redis's clock as their expiries
// were set (an instance whose clock is ahead took live holds for lapsed ones). False for a total Redis does not hold.
const PEEK = `
local spent = redis.call('GET', KEYS[1])
if not spent then return false end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {spent, redis.call('ZRANGEBYSCORE', KEYS[2], now, '+inf')}
`;

// KEYS: per scope, spent, holds, held sum, run. ARGV: run id, hold ttl ms, then the members of this instance's
// running requests. A total loaded while they ran (Redis emptied without a restart: FLUSHALL, an eviction) lost their
// holds: each goes back where it is missing, so that what Redis admits next leaves their room. Only into a total of
// this run. Returns how many went back.
const REHOLD = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local back = 0
for i = 1, #KEYS / 4 do
  if redis.call('EXISTS', KEYS[4*i-3]) == 1 and redis.call('GET', KEYS[4*i]) == ARGV[1] then
    for j = 3, #ARGV do
      if redis.call('ZADD', KEYS[4*i-2], 'NX', now + tonumber(ARGV[2]), ARGV[j]) == 1 then
        back = back + 1
        if redis.call('EXISTS', KEYS[4*i-1]) == 1 then redis.call('INCRBY', KEYS[4*i-1], tonumber(string.match(ARGV[j], ':(%d+)$'))) end
      end
    end
    if redis.call('PTTL', KEYS[4*i-2]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[4*i-2], tonumber(ARGV[2])) end
  end
end
return back
`;

// KEYS: the reconciliation marker. ARGV: this instance's id, how long the marker lives unless made again (ms).
const MARK_RECONCILING = `
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 0
`;

/**
 * The instances that owe Redis's totals costs they settled in the database's leases while they could not reach it
 * (a set; while it exists no reservation is admitted here). One key for every budget: an instance marks it when
 * its first reservation fails, before it knows which budgets it will spend on the leases. Not hash-tagged: the
 * gateway's Redis client is a single node's, as everywhere (the tags only keep a scope's keys together).
 */
const RECONCILING_KEY = 'gw:budget:reconciling';
/**
 * How long the marker outlives the last instance to make it: one that died while owing costs holds budgets on the
 * leases no longer than this. Those owing make it again at each catch-up run (every second).
 */
const RECONCILING_MS = 5_000;

/** Settles waiting for the next turn of the event loop, grouped by the keys they touch. */
interface SettleBatch {
  keys: string[];
  args: (string | number)[];
  waiters: { resolve: (held: boolean) => void; reject: (err: unknown) => void }[];
}

type Cmd = (...args: (string | number)[]) => Promise<number>;

/** Added to how long ago a cost owed was settled: the time its catch-up takes to reach Redis, and clocks' drift. */
const OWED_AGE_MARGIN_MS = 1_000;

interface ReserveArgs {
  tag: string;
  /** Per scope, spent, holds, held sum and run (what a settle touches). */
  keys: string[];
  /** The same and the reconciliation marker: what a reservation reads. */
  reserveKeys: string[];
  limits: number[];
  ids: string[];
  group: string;
}

/** The keys a reservation of this instance touches, worked out once when it is made. */
const settleKeysOf = hiddenSlot<Reservation, { keys: string[]; group: string }>('settleKeys');

/**
 * The budget ledger in Redis, shared by every instance. Spent totals are
 * loaded from the store the first time a scope is met (and again after a
 * Redis restart); holds expire on their own if their instance dies.
 */
export class RedisLedger implements BudgetLedger {
  private readonly settling = new Map<string, SettleBatch>();
  private readonly argsOfScopes = new WeakMap<BudgetScope[], ReserveArgs>();
  /** The loads of totals under way, by tag, scope and run (see {@link loadTotal}). */
  private readonly loading = new Map<string, Promise<void>>();
  private readonly reserveCmd: (...args: (string | number)[]) => Promise<number | typeof RECONCILING>;
  private readonly markCmd: Cmd;
  private readonly settleCmd: (...args: (string | number)[]) => Promise<number[]>;
  private readonly addSpentCmd: (...args: (string | number)[]) => Promise<number[]>;
  private readonly raiseSpentCmd: Cmd;
  private readonly renewCmd: Cmd;
  private readonly loadSpentCmd: Cmd;
  private readonly adoptHoldCmd: Cmd;
  private readonly settleLateCmd: (...args: (string | number)[]) => Promise<[number, number[]]>;
  private readonly reholdCmd: Cmd;
  private readonly peekCmd: (...args: (string | number)[]) => Promise<[string, string[]] | null>;
  /** Told when this instance found a scope's total missing in Redis and loaded it (holds there may be gone with it). */
  onTotalLoaded: ((tag: string, scopeId: string) => Promise<void>) | null = null;
  /** Redis's run id, which each total names (null: to be read, at start and after the connection dropped). */
  private run: string | null = null;
  private runRead: Promise<string> | null = null;

  constructor(
    private readonly redis: Redis,
    /** Names this instance in its holds; a refusal first lets go of holds whose instance died. */
    private readonly presence: InstancePresence,
    /** Writes this instance's pending usage records to the store, so that a total loaded from it has their costs. */
    private readonly flushUsage: () => Promise<void> = async () => {},
    /**
     * How often every instance writes its usage records: a total lost with Redis's data is loaded from the store only
     * once this (and a margin) has passed since the loss, so that the records of the costs settled before it are in.
     */
    private readonly usageFlushMs = 500,
  ) {
    redis.defineCommand('gwBudgetReserve', { lua: RESERVE });
    redis.defineCommand('gwBudgetSettle', { lua: SETTLE });
    this.reserveCmd = this.cmd('gwBudgetReserve') as unknown as (...args: (string | number)[]) => Promise<number | typeof RECONCILING>;
    redis.defineCommand('gwBudgetMarkReconciling', { lua: MARK_RECONCILING });
    this.markCmd = this.cmd('gwBudgetMarkReconciling');
    this.settleCmd = this.cmd('gwBudgetSettle') as unknown as (...args: (string | number)[]) => Promise<number[]>;
    redis.defineCommand('gwBudgetAddSpent', { lua: ADD_SPENT });
    this.addSpentCmd = this.cmd('gwBudgetAddSpent') as unknown as (...args: (string | number)[]) => Promise<number[]>;
    redis.defineCommand('gwBudgetRaiseSpent', { lua: RAISE_SPENT });
    this.raiseSpentCmd = this.cmd('gwBudgetRaiseSpent');
    redis.defineCommand('gwBudgetRenew', { lua: RENEW });
    this.renewCmd = this.cmd('gwBudgetRenew');
    redis.defineCommand('gwBudgetLoadSpent', { lua: LOAD_SPENT });
    this.loadSpentCmd = this.cmd('gwBudgetLoadSpent');
    redis.defineCommand('gwBudgetAdoptHold', { lua: ADOPT_HOLD });
    this.adoptHoldCmd = this.cmd('gwBudgetAdoptHold');
    redis.defineCommand('gwBudgetSettleLate', { lua: SETTLE_LATE });
    this.settleLateCmd = this.cmd('gwBudgetSettleLate') as unknown as (...args: (string | number)[]) => Promise<[number, number[]]>;
    redis.defineCommand('gwBudgetPeek', { lua: PEEK });
    this.peekCmd = this.cmd('gwBudgetPeek') as unknown as (...args: (string | number)[]) => Promise<[string, string[]] | null>;
    redis.defineCommand('gwBudgetRehold', { lua: REHOLD });
    this.reholdCmd = this.cmd('gwBudgetRehold');
    // The Redis that answers after a dropped connection may be another run, restored from a snapshot.
    redis.on('close', () => {
      this.run = null;
    });
  }

  /** Redis's run id, read once per connection. */
  private readRun(): Promise<string> {
    this.runRead ??= this.epoch()
      .then((run) => {
        this.run = run;
        return run;
      })
      .finally(() => {
        this.runRead = null;
      });
    return this.runRead;
  }

  /** The reservation `reserve` would have made: to release a hold whose reserve call failed yet may have run. */
  reservationOf(tag: string, scopes: BudgetScope[], eur: number, requestId: string): Reservation {
    const nano = toNano(eur);
    return { id: `${this.holder(requestId)}:${nano}`, nano, scopes: scopes.map((s) => s.id), tag };
  }

  private holder(requestId: string): string {
    return `${requestId}@${this.presence.id}`;
  }

  /**
   * Lets go of the holds, in these scopes, of instances that are no longer
   * alive (their requests died with them, unbilled); true if there were
   * any. Only on a refusal, so the holds are read only near a budget's end.
   */
  private async dropHoldsOfTheDead(args: ReserveArgs): Promise<boolean> {
    const members = new Set<string>();
    const [seconds, micros] = await this.redis.time();
    const redisNow = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
    // A hold younger than an instance's word that it is alive may be a live instance's whose word Redis lost (a
    // restart empties both): its owner says it again within ALIVE_TTL_MS. Dropping it would free room a running
    // request still needs, and its settle, finding no hold, would add nothing to the total.
    const madeBefore = redisNow + RESERVATION_TTL_MS - ALIVE_TTL_MS;
    for (let i = 1; i < args.keys.length; i += 4) {
      for (const m of await this.redis.zrangebyscore(args.keys[i] as string, '-inf', madeBefore)) members.add(m);
    }
    const named = [...members].filter((m) => instanceOf(m) !== null);
    if (named.length === 0) return false;
    const alive = await this.presence.alive(named.map((m) => instanceOf(m) as string));
    const dead = named.filter((m) => !alive.has(instanceOf(m) as string));
    if (dead.length === 0) return false;
    await this.settleCmd(args.keys.length, ...args.keys, this.run ?? (await this.readRun()), ...dead.flatMap((m) => [m, 0]));
    return true;
  }

  /**
   * Adds costs settled in another ledger (while this one was away), the first of them `sinceMs` ago, to the scopes'
   * totals; returns the scopes left alone, whose totals are to come from the store instead: not loaded in this run
   * (a load reads them from the store, which lacks the costs until their records are written), or taken from the
   * store since (they may have the costs already).
   */
  async addSpent(tag: string, scopeIds: string[], nano: number, sinceMs: number): Promise<string[]> {
    const keys = scopeIds.flatMap((id) => {
      const k = keysOf(tag, id);
      return [k[0], k[3], fromStoreKeyOf(tag, id)];
    });
    const toRaise = await this.addSpentCmd(keys.length, ...keys, nano, this.run ?? (await this.readRun()), Math.ceil(sinceMs) + OWED_AGE_MARGIN_MS);
    return toRaise.map((i) => scopeIds[i - 1] as string);
  }

  /** The reservation here of a request another ledger admitted (`r`, of the leases), once {@link adoptHolds} holds it. */
  adoptionOf(r: Reservation): Reservation {
    return { id: `${this.holder(r.id)}:${r.nano}`, nano: r.nano, scopes: r.scopes, tag: r.tag };
  }

  /**
   * Holds, whatever the budgets have left, running requests another ledger admitted (their {@link adoptionOf}), each
   * in all of its scopes or none (a total not loaded in this run); whether each is held. Settled as any reservation.
   */
  async adoptHolds(rs: Reservation[]): Promise<boolean[]> {
    const run = this.run ?? (await this.readRun());
    return Promise.all(
      rs.map(async (r) => {
        const keys = r.scopes.flatMap((id) => keysOf(r.tag, id));
        return (await this.adoptHoldCmd(keys.length, ...keys, r.id, r.nano, RESERVATION_TTL_MS, run)) === 1;
      }),
    );
  }

  /**
   * A settle that did not reach Redis, first sent `sinceMs` ago, sent again: whether its hold was found (else nothing
   * was done), and the scopes whose totals took the store's value since, where its cost was not added (they may have
   * it already, once its usage record was written): they are to be raised to the store's instead.
   */
  async settleLate(r: Reservation, actualEur: number, sinceMs: number): Promise<{ held: boolean; toRaise: string[] }> {
    const keys = r.scopes.flatMap((id) => [...keysOf(r.tag, id), fromStoreKeyOf(r.tag, id)]);
    const run = this.run ?? (await this.readRun());
    const [found, toRaise] = await this.settleLateCmd(keys.length, ...keys, run, r.id, toNano(actualEur), Math.ceil(sinceMs) + OWED_AGE_MARGIN_MS);
    return { held: found === 1, toRaise: toRaise.map((i) => r.scopes[i - 1] as string) };
  }

  /**
   * Holds again, in one scope, the holds of this instance's running requests (`rs`) that Redis no longer has: a total
   * loaded while they ran. Those it still has stay as they are.
   */
  async rehold(tag: string, scopeId: string, rs: Reservation[]): Promise<void> {
    if (rs.length === 0) return;
    const keys = keysOf(tag, scopeId);
    await this.reholdCmd(keys.length, ...keys, this.run ?? (await this.readRun()), RESERVATION_TTL_MS, ...rs.map((r) => r.id));
  }

  /** Redis's run id: a restart changes it, and takes every total Redis held with it. */
  async epoch(): Promise<string> {
    const info = await this.redis.info('server');
    return /run_id:(\w+)/.exec(info)?.[1] ?? '';
  }

  /**
   * Raises a scope's total to what the store has, if it holds less (a total it does not hold is loaded from
   * the store at the next reservation anyway). Never lowers it, and never drops it: settles in flight still land.
   */
  async raiseSpent(tag: string, scopeId: string, storeEur: number): Promise<void> {
    const k = keysOf(tag, scopeId);
    await this.raiseSpentCmd(3, k[0], k[3], fromStoreKeyOf(tag, scopeId), toNano(storeEur), this.run ?? (await this.readRun()));
  }

  /**
   * Marks the ledger as reconciling (this instance owes its totals costs settled in the database's leases): until
   * it unmarks it (or stops making the mark, which then lapses), reservations answer {@link RECONCILING}.
   */
  async markReconciling(): Promise<void> {
    await this.markCmd(1, RECONCILING_KEY, this.presence.id, RECONCILING_MS);
  }

  async isReconciling(): Promise<boolean> {
    return (await this.redis.exists(RECONCILING_KEY)) === 1;
  }

  /** This instance owes nothing more: its mark goes (the marker with it, if no other instance's is left). */
  async unmarkReconciling(): Promise<void> {
    await this.redis.srem(RECONCILING_KEY, this.presence.id);
  }

  async reserve(tag: string, scopes: BudgetScope[], eur: number, requestId: string): Promise<ReserveResult> {
    const res = await this.reserveShared(tag, scopes, eur, requestId);
    if (res === RECONCILING) throw new Error('the budget ledger is reconciling costs settled while Redis was away');
    return res;
  }

  /** As {@link reserve}, but answers {@link RECONCILING} (nothing held) while another instance adds what it owes these totals. */
  async reserveShared(tag: string, scopes: BudgetScope[], eur: number, requestId: string): Promise<ReserveResult | typeof RECONCILING> {
    const nano = toNano(eur);
    const args = this.reserveArgs(tag, scopes);
    const { reserveKeys, limits, ids } = args;
    const holder = this.holder(requestId);
    const run = this.run ?? (await this.readRun());
    let swept = false;
    for (let attempt = 0; attempt < 4; attempt++) {
      const res = await this.reserveCmd(reserveKeys.length, ...reserveKeys, nano, holder, RESERVATION_TTL_MS, run, ...limits);
      if (res === RECONCILING) return res;
      if (res === 0) {
        const reservation = { id: `${holder}:${nano}`, nano, scopes: ids, tag };
        settleKeysOf.set(reservation, args);
        return { ok: true, reservation };
      }
      if (res > 0) {
        // Refused: once, holds an instance left when it died (they would stand for 15 minutes) go first.
        if (!swept && (await this.dropHoldsOfTheDead(args))) {
          swept = true;
          continue;
        }
        return { ok: false, scope: (scopes[res - 1] as BudgetScope).id };
      }
      await this.loadTotal(tag, scopes[-res - 1] as BudgetScope, run);
    }
    throw new Error('budget ledger could not load its totals');
  }

  /**
   * Loads a scope's total into Redis, one load per scope at a time: the burst that finds it not loaded (a key's
   * first requests, the first after a restart) waits for that one. Each request reading the store itself queued
   * hundreds of reads on the pool's few connections; those that waited past its connect timeout failed the
   * reservation, and the requests went to the database's leases while Redis was up, which overspent the budget.
   */
  private loadTotal(tag: string, scope: BudgetScope, run: string): Promise<void> {
    const id = `${tag} ${scope.id} ${run}`;
    let loading = this.loading.get(id);
    if (!loading) {
      loading = (async () => {
        // This instance's usage records not yet written go to the store first, or the total loaded lacks their costs
        // for good: after Redis lost its totals, an instance catching up raises to the store's only the totals loaded
        // already (often none yet), and the room of those costs was admitted a second time. Once per scope and run.
        await this.flushUsage().catch(() => {});
        // The other instances' are written by their own writers, every usageFlushMs: a total lost with Redis's data
        // (a restart, a FLUSHALL) is loaded only once the records of the costs settled before the loss are in too.
        const { ageMs } = await redisDataLife(this.redis);
        const writtenAfterMs = lastCostsStoredAfterMs(this.usageFlushMs);
        if (ageMs < writtenAfterMs) await sleep(writtenAfterMs - ageMs);
        // The leases first: a cost that leaves a lease for the stored total between the two reads is then counted in
        // both (room held back a moment), never in neither.
        const leased = await (scope.loadLeased?.() ?? NOTHING_LEASED);
        const spent = await scope.loadSpent();
        await this.loadSpentCmd(
          5,
          ...keysOf(tag, scope.id),
          fromStoreKeyOf(tag, scope.id),
          toNano(spent),
          leased.nano,
          Math.ceil(Math.min(leased.ms, LEASED_HOLD_MS)),
          run,
        );
        // Running requests' holds the total's loss took go back before this reservation is tried again (whichever
        // instance's load won: the others' are told by the one that loads, but this one may be asked first).
        await this.onTotalLoaded?.(tag, scope.id).catch(() => {});
      })().finally(() => this.loading.delete(id));
      this.loading.set(id, loading);
    }
    return loading;
  }

  /**
   * Resolves once the hold is off and the spend added. Settles made in
   * the same turn of the event loop (answers finishing together under
   * load) share one script call per set of scopes; until it runs, the
   * hold still counts, so a reservation meanwhile sees less left, never more.
   */
  async settle(r: Reservation, actualEur: number): Promise<void> {
    await this.settleHeld(r, actualEur);
  }

  /** As {@link settle}; resolves false if Redis had no hold for it (it restarted, or the hold expired): its cost was not added. */
  settleHeld(r: Reservation, actualEur: number): Promise<boolean> {
    const { keys, group } = settleKeysOf.get(r) ?? settleKeys(r);
    let batch = this.settling.get(group);
    if (!batch) {
      batch = { keys, args: [], waiters: [] };
      this.settling.set(group, batch);
      if (this.settling.size === 1) setImmediate(() => this.flushSettles());
    }
    batch.args.push(r.id, toNano(actualEur));
    return new Promise((resolve, reject) => batch.waiters.push({ resolve, reject }));
  }

  private flushSettles(): void {
    const batches = [...this.settling.values()];
    this.settling.clear();
    if (this.run !== null) this.sendSettles(batches, this.run);
    else
      this.readRun().then(
        (run) => this.sendSettles(batches, run),
        (err: unknown) => {
          for (const b of batches) for (const w of b.waiters) w.reject(err);
        },
      );
  }

  private sendSettles(batches: SettleBatch[], run: string): void {
    for (const b of batches) {
      this.settleCmd(b.keys.length, ...b.keys, run, ...b.args).then(
        (found) => {
          for (const [i, w] of b.waiters.entries()) w.resolve(found[i] === 1);
        },
        (err: unknown) => {
          for (const w of b.waiters) w.reject(err);
        },
      );
    }
  }

  async release(r: Reservation): Promise<void> {
    await this.settle(r, 0);
  }

  async renew(r: Reservation): Promise<void> {
    const keys = r.scopes.flatMap((id) => keysOf(r.tag, id).slice(1, 3));
    await this.renewCmd(keys.length, ...keys, r.id, RESERVATION_TTL_MS);
  }

  /**
   * When holds of `nano` in all can be let go at the latest, as far as Redis says: room leased in the database when
   * it expires; the hold of an instance that missed renewing its word that it is alive once that word lapses and the
   * hold is as old as the word lasts (what {@link dropHoldsOfTheDead} asks). The holds of a running request (this
   * instance's, or one of an instance that renews its word) end when the request does, at no known time: they count
   * as {@link HELD_POLL_MS}, as every such refusal did before; telling them instead to wait for a lapse that never
   * comes made a client of two live instances wait 4-6 s where their requests ended in milliseconds. Only on a refusal
   * that holds cause: one round trip for the holds, one for their instances.
   */
  async roomBackInMs(tag: string, scopeId: string, nano: number): Promise<number | null> {
    const [, holdsKey] = keysOf(tag, scopeId);
    const [[seconds, micros], flat] = await Promise.all([this.redis.time(), this.redis.zrange(holdsKey, 0, '-1', 'WITHSCORES')]);
    const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
    const holds: { member: string; expiresAt: number; instance: string | null }[] = [];
    for (let i = 0; i + 1 < flat.length; i += 2) {
      const member = flat[i] as string;
      const expiresAt = Number(flat[i + 1]);
      if (expiresAt > now) holds.push({ member, expiresAt, instance: instanceOf(member) });
    }
    const others = [...new Set(holds.map((h) => h.instance).filter((id) => id !== null && id !== this.presence.id))] as string[];
    const ttls = await Promise.all(others.map((id) => this.redis.pttl(instanceKey(id))));
    // -2: no word at all (it lapsed); -1: a word without a lapse, which no instance writes: as a live one's.
    const lapse = new Map(others.map((id, i) => [id, (ttls[i] as number) === -2 ? 0 : (ttls[i] as number)]));
    const frees = holds.map(({ member, expiresAt, instance }) => {
      const amount = Number(member.slice(member.lastIndexOf(':') + 1));
      if (instance === null) return { inMs: expiresAt - now, amount };
      const left = instance === this.presence.id ? -1 : (lapse.get(instance) ?? 0);
      if (left < 0 || left >= MISSED_RENEWAL_BELOW_MS) return { inMs: HELD_POLL_MS, amount };
      const oldEnough = expiresAt - RESERVATION_TTL_MS + ALIVE_TTL_MS - now;
      return { inMs: Math.max(oldEnough, left), amount };
    });
    frees.sort((a, b) => a.inMs - b.inMs);
    let freed = 0;
    for (const f of frees) {
      freed += f.amount;
      if (freed >= nano) return Math.min(ALIVE_TTL_MS, Math.max(0, f.inMs));
    }
    return null;
  }

  async peek(tag: string, scopeId: string): Promise<{ spent: number; reserved: number } | null> {
    const [spentKey, holdsKey] = keysOf(tag, scopeId);
    const seen = await this.peekCmd(2, spentKey, holdsKey);
    if (seen === null) return null;
    const [spent, holds] = seen;
    const reserved = holds.reduce((sum, m) => sum + Number(m.slice(m.lastIndexOf(':') + 1)), 0);
    return { spent: fromNano(Number(spent)), reserved: fromNano(reserved) };
  }

  /** A key's requests share one scopes array (cached per key record, http/budget.ts): their script arguments are worked out once. */
  private reserveArgs(tag: string, scopes: BudgetScope[]): ReserveArgs {
    const known = this.argsOfScopes.get(scopes);
    if (known && known.tag === tag) return known;
    const keys = scopes.flatMap((s) => keysOf(tag, s.id));
    const args = {
      tag,
      keys,
      reserveKeys: [...keys, RECONCILING_KEY],
      limits: scopes.map((s) => (s.limit === null ? -1 : limitNano(s.limit))),
      ids: scopes.map((s) => s.id),
      group: keys.join(' '),
    };
    this.argsOfScopes.set(scopes, args);
    return args;
  }

  private cmd(name: string): Cmd {
    const fn = (this.redis as unknown as Record<string, Cmd>)[name] as Cmd;
    return fn.bind(this.redis);
  }
}

const NOTHING_LEASED = Promise.resolve({ nano: 0, ms: 0 });

/** A hold's instance: what follows its last '@' (null: room leased in the database, which names none). */
function instanceOf(member: string): string | null {
  const at = member.lastIndexOf('@');
  return at < 0 ? null : member.slice(at + 1, member.lastIndexOf(':'));
}

/** How soon a refusal asks again about the holds of running requests, which end with them: as before, 1 s. */
const HELD_POLL_MS = 1_000;

/**
 * A word that it is alive with less than this left was not renewed when due (every 2 s for 6 s; 500 ms allowed for
 * a late timer or a slow Redis): its instance has likely died, and its holds go when the word lapses.
 */
const MISSED_RENEWAL_BELOW_MS = ALIVE_TTL_MS - ALIVE_EVERY_MS - 500;

/**
 * How long a total loaded into an empty Redis holds the room the database's leases keep: long enough for every
 * instance to be back on Redis (they reconnect up to 2 s apart, then catch up), and no longer, since leases are only
 * given back when idle (5 s) or when they lapse (30 s), and a key with budget left was refused meanwhile.
 */
const LEASED_HOLD_MS = 5_000;

function settleKeys(r: Reservation): { keys: string[]; group: string } {
  const keys = r.scopes.flatMap((id) => keysOf(r.tag, id));
  return { keys, group: keys.join(' ') };
}

/** When the scope's total last took the store's value (not among the keys a reservation or a settle touches). */
function fromStoreKeyOf(tag: string, scopeId: string): string {
  return `gw:budget:{${tag}}:${scopeId}:from-store`;
}

/** The scopes of one request share a hash tag, so the script's keys sit in one Cluster slot. */
function keysOf(tag: string, scopeId: string): [spent: string, holds: string, heldSum: string, run: string] {
  const base = `gw:budget:{${tag}}:${scopeId}`;
  return [`${base}:spent`, `${base}:holds`, `${base}:held`, `${base}:run`];
}
