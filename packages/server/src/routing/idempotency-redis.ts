import type { Redis } from 'ioredis';
import { CircuitBreaker } from '../limits/circuit-breaker.js';
import type { IdempotencyBackend, IdempotencyEntry, StoredAnswer } from './idempotency-types.js';

/** How long an answer not yet written for good (a stream still running, a write that failed) is kept to be written again. */
const HELD_ANSWER_MAX_MS = 15 * 60_000;

/** How often an answer whose write failed is tried again. */
const ANSWER_RETRY_MS = 1_000;

/** A claim of this instance still running, or an answer of it not yet written for good. */
interface Held {
  scope: string;
  fingerprint: string;
  ttlMs: number;
  answer: StoredAnswer | null;
}

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
// A missing hash is a claim Redis lost (a restart without persistence): its owner writes it again, so that a repeat
// waits for this request or replays its answer rather than running it a second time. ARGV[3]: the fingerprint.
const REFRESH = `
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'state', 'pending', 'fp', ARGV[3], 'owner', ARGV[1])
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] and redis.call('HGET', KEYS[1], 'state') == 'pending' then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`;
// ARGV[4]: the fingerprint, to store the answer under a claim Redis lost.
const COMPLETE = `
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner and owner ~= ARGV[1] then return 0 end
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

type Script = (key: string, ...args: (string | number)[]) => Promise<unknown>;
interface Scripts {
  gwIdemClaim: Script;
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

  constructor(private readonly redis: Redis) {
    redis.defineCommand('gwIdemClaim', { numberOfKeys: 1, lua: CLAIM });
    redis.defineCommand('gwIdemRefresh', { numberOfKeys: 1, lua: REFRESH });
    redis.defineCommand('gwIdemComplete', { numberOfKeys: 1, lua: COMPLETE });
    redis.defineCommand('gwIdemRelease', { numberOfKeys: 1, lua: RELEASE });
    redis.defineCommand('gwIdemDrop', { numberOfKeys: 1, lua: DROP });
    redis.on('ready', () => this.writeHeldAgain());
  }

  async claim(scope: string, fingerprint: string, owner: string, ttlMs: number): Promise<IdempotencyEntry | null> {
    const res = (await this.run('gwIdemClaim', scope, fingerprint, owner, Math.round(ttlMs))) as [string | null, string | null, string | null] | null;
    if (res === null) {
      this.held.set(owner, { scope, fingerprint, ttlMs, answer: null });
      return null;
    }
    const [state, fp, answer] = res;
    if (state === 'done' && answer !== null) return { state: 'done', fingerprint: fp ?? '', answer: JSON.parse(answer) as StoredAnswer };
    return { state: 'pending', fingerprint: fp ?? '' };
  }

  async refresh(scope: string, owner: string, ttlMs: number): Promise<void> {
    const held = this.held.get(owner);
    // Only a claim of this instance is written again if lost: its fingerprint is known here.
    if (!held) return;
    await this.run('gwIdemRefresh', scope, owner, Math.round(ttlMs), held.fingerprint);
  }

  async complete(_scope: string, owner: string, answer: StoredAnswer, ttlMs: number): Promise<void> {
    const held = this.held.get(owner);
    if (!held) return;
    // Kept to be written again after a reconnect: a stream's answer stored as begun until it is stored with its events,
    // and any answer whose write fails (Redis away when the request ended). Not for good: an archive that never comes
    // or a Redis that never returns must not keep it here past HELD_ANSWER_MAX_MS.
    if (held.answer === null) {
      setTimeout(() => {
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
    const final = !answer.stream || answer.stream.events !== undefined;
    if (final && this.held.get(owner) === held && held.answer === answer) this.held.delete(owner);
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
    this.held.delete(owner);
    await this.run('gwIdemRelease', scope, owner);
  }

  async drop(scope: string, owner: string): Promise<void> {
    this.held.delete(owner);
    await this.run('gwIdemDrop', scope, owner);
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
      : (['gwIdemRefresh', [owner, Math.round(h.ttlMs), h.fingerprint]] as const);
    if (!pastBreaker) return this.run(name, h.scope, ...args);
    return (this.redis as unknown as Scripts)[name].call(this.redis, keyOf(h.scope), ...args);
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
