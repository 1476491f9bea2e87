import type { Redis } from 'ioredis';
import { instanceKey } from '../kv/instance-presence.js';
import { DATA_RUN_KEY, DATA_SINCE_KEY, redisDataLife } from '../kv/redis-data-life.js';
import { CircuitBreaker } from '../limits/circuit-breaker.js';
import { type IdempotencyBackend, type IdempotencyEntry, NotSentError, type StoredAnswer } from './idempotency-types.js';

/** How long an answer not yet written for good (a stream still running, a write that failed) is kept to be written again. */
const HELD_ANSWER_MAX_MS = 15 * 60_000;

/** How often an answer whose write failed is tried again. */
const ANSWER_RETRY_MS = 1_000;

/**
 * After Redis restarted empty, how long this instance claims no key Redis does not hold: every instance reconnects
 * within 2 s of Redis being back (kv/redis.ts retries at most 2 s apart) and then writes again the claims and answers
 * it holds; a repeat claiming before that found nothing and ran a second time.
 */
const RESTART_SETTLE_MS = 3_000;

/** A claim of this instance still running, or an answer of it not yet written for good. */
interface Held {
  scope: string;
  fingerprint: string;
  ttlMs: number;
  answer: StoredAnswer | null;
  /** Lets go of an answer never written (HELD_ANSWER_MAX_MS); cleared once it is, since its closure holds the answer. */
  expiry: NodeJS.Timeout | null;
}

/** One hash per scope, hash-tagged for Redis Cluster. */
const keyOf = (scope: string) => `gw:idem:{${scope}}`;

// A claim names the run of Redis it was written in (ARGV[4]). A claim of an earlier run came back from a snapshot
// (RDB or AOF) after a restart: its owner, if still running it, wrote it again in this run (writeHeldAgain); one
// nobody wrote again by the time the restart has settled (ARGV[5] = '1') is of a request long ended or an instance
// gone, and is taken over rather than waited on until it expires. A claim without a run is kept (an older gateway's).
// ARGV[6]: this instance, named in the claim (TAKE_OVER). A live entry is returned with its owner and instance.
// A missing key is not claimed while Redis settles after losing its data under open connections (FLUSHALL, FLUSHDB:
// no reconnect tells the instances): KEYS[4] is set for RESTART_SETTLE_MS (ARGV[7]) by the first claim that finds the
// mark (KEYS[2]) gone, which writes it anew with the run (KEYS[3]); meanwhile each instance hears its word that it is
// alive was lost too (kv/instance-presence.ts) and writes its claims and answers again. Answered {'settling'}.
// An answer is returned with its age in ms by Redis's clock (ANSWER_AGE), where it was stamped.
const ANSWER_AGE = `
local function age(at)
  if not at then return false end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(at)
end
`;
const CLAIM = `${ANSWER_AGE}
local e = redis.call('HMGET', KEYS[1], 'state', 'fp', 'answer', 'run', 'owner', 'inst', 'at')
if e[1] then
  if not (ARGV[5] == '1' and e[1] == 'pending' and e[4] and e[4] ~= ARGV[4]) then
    return {e[1], e[2], e[3] or false, e[5] or false, e[6] or false, e[1] == 'done' and age(e[7])}
  end
  redis.call('DEL', KEYS[1])
elseif redis.call('EXISTS', KEYS[4]) == 1 then
  return {'settling'}
elseif redis.call('EXISTS', KEYS[2]) == 0 then
  local t = redis.call('TIME')
  redis.call('SET', KEYS[2], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
  redis.call('SET', KEYS[3], string.match(redis.call('INFO', 'server'), 'run_id:(%w+)'))
  redis.call('SET', KEYS[4], '1', 'PX', ARGV[7])
  return {'settling'}
end
redis.call('HSET', KEYS[1], 'state', 'pending', 'fp', ARGV[1], 'owner', ARGV[2], 'run', ARGV[4], 'inst', ARGV[6])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return false
`;
// A pending claim whose instance (field inst) no longer says it is alive: taken over only if it is still the claim
// seen (ARGV[1]: its owner; ARGV[2]: the fingerprint), so that of two repeats that both found it, one runs.
const TAKE_OVER = `
local e = redis.call('HMGET', KEYS[1], 'state', 'owner', 'fp')
if e[1] ~= 'pending' or e[2] ~= ARGV[1] or e[3] ~= ARGV[2] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'state', 'pending', 'fp', ARGV[2], 'owner', ARGV[3], 'run', ARGV[5], 'inst', ARGV[6])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
`;
// A missing hash is a claim Redis lost (a restart without persistence): its owner writes it again, so that a repeat
// waits for this request or replays its answer rather than running it a second time. ARGV[3]: the fingerprint;
// ARGV[4]: this run of Redis ('' while not read yet), which a claim back from a snapshot is marked with again;
// ARGV[5]: this instance.
const REFRESH = `
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'state', 'pending', 'fp', ARGV[3], 'owner', ARGV[1], 'run', ARGV[4], 'inst', ARGV[5])
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] and redis.call('HGET', KEYS[1], 'state') == 'pending' then
  if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'run', ARGV[4]) end
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`;
// ARGV[4]: the fingerprint, to store the answer under a claim Redis lost. Field 'at': when the first answer was stored,
// by Redis's clock (one written again after a reconnect keeps it), which a repeat on any instance reads as an age.
const COMPLETE = `
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner and owner ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[1], 'state') ~= 'done' or redis.call('HEXISTS', KEYS[1], 'at') == 0 then
  local t = redis.call('TIME')
  redis.call('HSET', KEYS[1], 'at', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
end
redis.call('HSET', KEYS[1], 'state', 'done', 'answer', ARGV[2], 'fp', ARGV[4], 'owner', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`;
const RELEASE = `
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] and redis.call('HGET', KEYS[1], 'state') == 'pending' then
  return redis.call('DEL', KEYS[1])
end
return 0
`;

const DROP = `
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`;

const PEEK = `${ANSWER_AGE}
local e = redis.call('HMGET', KEYS[1], 'state', 'fp', 'answer', 'at')
return {e[1] or false, e[2] or false, e[3] or false, false, false, e[1] == 'done' and age(e[4])}
`;

/** Set for RESTART_SETTLE_MS once a claim found the mark gone under an open connection: see CLAIM. */
const SETTLING_KEY = 'gw:idem:settling';

/** state, fingerprint, answer of a key (and from a claim, its owner and instance), and a stored answer's age in ms. */
type Fields = [string | null, string | null, string | null, (string | null)?, (string | null)?, (number | null)?];

type Script = (key: string, ...args: (string | number)[]) => Promise<unknown>;
interface Scripts {
  gwIdemPeek: Script;
  gwIdemClaim: Script;
  gwIdemTakeOver: Script;
  gwIdemRefresh: Script;
  gwIdemComplete: Script;
  gwIdemRelease: Script;
  gwIdemDrop: Script;
}

/**
 * Idempotency in Redis, shared by every instance: a claim is one atomic
 * script (exists? else take it with an expiry), and the owner-checked
 * scripts refresh, complete or release it. After a failure, calls fail at
 * once for a second instead of each waiting for a timeout.
 */
export class RedisIdempotencyBackend implements IdempotencyBackend {
  private readonly breaker = new CircuitBreaker(1000);
  /**
   * This instance's claims still running, and the answers of its streams still running (stored as begun, completed
   * again with their events at the end), by owner: written again as soon as the connection is back, since the Redis
   * it reconnected to may have restarted empty, and a repeat that then found nothing ran the request again.
   */
  private readonly held = new Map<string, Held>();
  /** Whether this instance has been connected to Redis before: only a reconnect can find Redis emptied under it. */
  private connectedBefore = false;
  /** Until when (Date.now()) a key Redis does not hold is not claimed, but waited on: see RESTART_SETTLE_MS. */
  private settleUntil = 0;
  /** The run id of the Redis connected to (null: to be read, at start and after the connection dropped). */
  private run: string | null = null;
  private markRead: Promise<number> | null = null;
  /** From when (Date.now()) a claim of an earlier run of Redis is taken over: see CLAIM. */
  private takeOverFrom = Number.POSITIVE_INFINITY;

  constructor(
    private readonly redis: Redis,
    /** This instance's name, written in its claims: a repeat takes over a claim whose instance is gone (kv/instance-presence.ts). */
    private readonly instance = '',
  ) {
    redis.defineCommand('gwIdemClaim', { numberOfKeys: 4, lua: CLAIM });
    redis.defineCommand('gwIdemTakeOver', { numberOfKeys: 1, lua: TAKE_OVER });
    redis.defineCommand('gwIdemRefresh', { numberOfKeys: 1, lua: REFRESH });
    redis.defineCommand('gwIdemComplete', { numberOfKeys: 1, lua: COMPLETE });
    redis.defineCommand('gwIdemRelease', { numberOfKeys: 1, lua: RELEASE });
    redis.defineCommand('gwIdemDrop', { numberOfKeys: 1, lua: DROP });
    redis.defineCommand('gwIdemPeek', { numberOfKeys: 1, lua: PEEK });
    redis.on('ready', () => void this.noteRestart());
    // The Redis that answers after a dropped connection may be another run, restored from a snapshot.
    redis.on('close', () => {
      this.run = null;
    });
    if (redis.status === 'ready') void this.noteRestart();
  }

  /**
   * Reads the mark of the life of Redis's data (kv/redis-data-life.ts; with it the run id): how long ago it was written
   * tells a reconnect whether Redis was emptied just now. Once per connection; claims made meanwhile wait for it.
   */
  private readMark(): Promise<number> {
    this.markRead ??= redisDataLife(this.redis)
      .then(({ ageMs, run }) => {
        this.run = run;
        // A claim of an earlier run is taken over only once every instance has had the time to write its own again.
        this.takeOverFrom = Date.now() + Math.max(0, RESTART_SETTLE_MS - ageMs);
        return ageMs;
      })
      .finally(() => {
        this.markRead = null;
      });
    return this.markRead;
  }

  /**
   * Marks Redis as holding this gateway's keys (a key with the time it was first written), and on a reconnect that
   * finds no mark (Redis restarted empty, or was flushed) or a mark younger than RESTART_SETTLE_MS, waits out the rest
   * of that time before claiming keys Redis does not hold. Every instance that comes back reads the same mark, so
   * they all wait until the same moment. Until the mark is read, a reconnect waits as if Redis had been emptied.
   */
  private async noteRestart(): Promise<void> {
    const reconnect = this.connectedBefore;
    this.connectedBefore = true;
    if (reconnect) this.settleUntil = Date.now() + RESTART_SETTLE_MS;
    const until = this.settleUntil;
    let ageMs: number;
    try {
      ageMs = await this.readMark();
    } catch {
      return;
    } finally {
      // After the mark, so that a claim back from a snapshot is marked with this run (unless it could not be read).
      if (reconnect) this.writeHeldAgain();
    }
    if (this.settleUntil !== until) return;
    this.settleUntil = reconnect && ageMs < RESTART_SETTLE_MS ? Date.now() + RESTART_SETTLE_MS - ageMs : 0;
  }

  async claim(scope: string, fingerprint: string, owner: string, ttlMs: number): Promise<IdempotencyEntry | null> {
    const now = Date.now();
    if (now < this.settleUntil) return this.peekWhileSettling(scope, fingerprint);
    if (this.run === null) await this.readMark();
    const takeOver = now >= this.takeOverFrom ? '1' : '0';
    const ttl = Math.round(ttlMs);
    const res = (await this.exec(
      'gwIdemClaim',
      scope,
      DATA_SINCE_KEY,
      DATA_RUN_KEY,
      SETTLING_KEY,
      fingerprint,
      owner,
      ttl,
      this.run ?? '',
      takeOver,
      this.instance,
      RESTART_SETTLE_MS,
    )) as Fields | null;
    if (res === null) return this.claimed(scope, fingerprint, owner, ttlMs);
    const [state, fp, answer, holder, inst, ageMs] = res;
    // Redis lost its data under open connections: the claim or answer may be on its way from the instance holding it.
    if (state === 'settling') return { state: 'pending', fingerprint };
    if (state === 'done' && answer !== null) return { state: 'done', fingerprint: fp ?? '', answer: storedAnswer(answer, ageMs) };
    // Its instance was killed (its request died unbilled, nobody will answer it): a repeat runs rather than wait for
    // the claim's expiry. Not while a restart settles, when a live instance's word that it is alive may not be back yet.
    if (
      fp === fingerprint &&
      holder &&
      inst &&
      this.instance &&
      inst !== this.instance &&
      takeOver === '1' &&
      (await this.redis.exists(instanceKey(inst))) === 0
    ) {
      const taken = await this.exec('gwIdemTakeOver', scope, holder, fingerprint, owner, ttl, this.run ?? '', this.instance);
      if (taken === 1) return this.claimed(scope, fingerprint, owner, ttlMs);
    }
    return { state: 'pending', fingerprint: fp ?? '' };
  }

  private claimed(scope: string, fingerprint: string, owner: string, ttlMs: number): null {
    this.held.set(owner, { scope, fingerprint, ttlMs, answer: null, expiry: null });
    return null;
  }

  /**
   * What Redis holds for the key, without claiming it: a key it does not hold reads as pending (its claim may be
   * on its way from the instance running it), and the repeat looks again until the settling is over.
   */
  private async peekWhileSettling(scope: string, fingerprint: string): Promise<IdempotencyEntry> {
    const res = (await this.exec('gwIdemPeek', scope)) as Fields;
    const [state, fp, answer, , , ageMs] = res;
    if (state === null) return { state: 'pending', fingerprint };
    if (state === 'done' && answer !== null) return { state: 'done', fingerprint: fp ?? '', answer: storedAnswer(answer, ageMs) };
    return { state: 'pending', fingerprint: fp ?? '' };
  }

  async refresh(scope: string, owner: string, ttlMs: number): Promise<void> {
    const held = this.held.get(owner);
    // Only a claim of this instance is written again if lost: its fingerprint is known here.
    if (!held) return;
    await this.exec('gwIdemRefresh', scope, owner, Math.round(ttlMs), held.fingerprint, this.run ?? '', this.instance);
  }

  async complete(_scope: string, owner: string, answer: StoredAnswer, ttlMs: number): Promise<void> {
    const held = this.held.get(owner);
    if (!held) return;
    // Kept to be written again after a reconnect: a stream's answer stored as begun until it is stored with its events,
    // and any answer whose write fails (Redis away when the request ended). Not for good: an archive that never comes
    // or a Redis that never returns must not keep it here past HELD_ANSWER_MAX_MS.
    if (held.expiry === null) {
      held.expiry = setTimeout(() => {
        if (this.held.get(owner) === held) this.held.delete(owner);
      }, HELD_ANSWER_MAX_MS).unref();
    }
    held.answer = answer;
    held.ttlMs = ttlMs;
    try {
      await this.writeHeld(owner, held);
    } catch (err) {
      // A stalled Redis gives no reconnect to write it again on: tried every second meanwhile.
      this.retryLater(owner, held);
      throw err;
    }
    this.written(owner, held, answer);
  }

  /** A final answer (not a stream's begun one) written: nothing left to keep for it. */
  private written(owner: string, held: Held, answer: StoredAnswer): void {
    const final = !answer.stream || answer.stream.events !== undefined || answer.stream.notKept !== undefined;
    if (final && this.held.get(owner) === held && held.answer === answer) this.letGo(owner);
  }

  /** Forgets `owner`'s claim and answer, and the timer that would have (which holds the answer until it fires). */
  private letGo(owner: string): void {
    const held = this.held.get(owner);
    if (held?.expiry) clearTimeout(held.expiry);
    this.held.delete(owner);
  }

  private retryLater(owner: string, held: Held): void {
    setTimeout(() => {
      const answer = held.answer;
      if (this.held.get(owner) !== held || answer === null) return;
      this.writeHeld(owner, held).then(
        () => this.written(owner, held, answer),
        () => this.retryLater(owner, held),
      );
    }, ANSWER_RETRY_MS).unref();
  }

  async release(scope: string, owner: string): Promise<void> {
    this.letGo(owner);
    await this.exec('gwIdemRelease', scope, owner);
  }

  async drop(scope: string, owner: string): Promise<void> {
    this.letGo(owner);
    await this.exec('gwIdemDrop', scope, owner);
  }

  /**
   * Redis lost its data under this open connection (FLUSHALL, FLUSHDB: kv/instance-presence.ts heard it): what this
   * instance holds is written again, as after a reconnect. Until then a repeat elsewhere finds nothing, and claims
   * that find the mark gone with it wait (CLAIM) rather than run the request a second time.
   */
  dataLost(): void {
    this.writeHeldAgain();
  }

  /** After a reconnect: every claim and stream answer of this instance that is still running, written again where missing. */
  private writeHeldAgain(): void {
    for (const [owner, h] of this.held) {
      const answer = h.answer;
      // Sent past the circuit breaker, which the outage just opened: the connection is back, these must not wait.
      this.writeHeld(owner, h, true).then(
        () => answer && this.written(owner, h, answer),
        () => {
          // The heartbeat (claims), the retry (answers) or the stream's last complete writes it again.
        },
      );
    }
  }

  /** Writes what this instance holds for `owner`: its answer if it has one, else its claim (either made again if lost). */
  private writeHeld(owner: string, h: Held, pastBreaker = false): Promise<unknown> {
    const [name, args] = h.answer
      ? (['gwIdemComplete', [owner, JSON.stringify(h.answer), Math.round(h.ttlMs), h.fingerprint]] as const)
      : (['gwIdemRefresh', [owner, Math.round(h.ttlMs), h.fingerprint, this.run ?? '', this.instance]] as const);
    if (!pastBreaker) return this.exec(name, h.scope, ...args);
    return (this.redis as unknown as Scripts)[name].call(this.redis, keyOf(h.scope), ...args);
  }

  private async exec(name: keyof Scripts, scope: string, ...args: (string | number)[]): Promise<unknown> {
    if (this.redis.status !== 'ready' || !this.breaker.allow()) throw new NotSentError('Redis is unavailable');
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

/** A stored answer as read; a stream's with how long ago, by Redis's clock, the answer was first stored (where it tells). */
function storedAnswer(json: string, ageMs: number | null | undefined): StoredAnswer {
  const answer = JSON.parse(json) as StoredAnswer;
  if (answer.stream && typeof ageMs === 'number') answer.stream.ageMs = ageMs;
  return answer;
}
