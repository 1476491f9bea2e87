import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';

/** Each instance says it is alive this often, for this long. */
export const ALIVE_EVERY_MS = 2_000;
export const ALIVE_TTL_MS = 6_000;

export const instanceKey = (id: string): string => `gw:instance:${id}`;

/** Says so, and tells whether the word was still there (0: Redis lost it). */
const SAY_ALIVE = `
local had = redis.call('EXISTS', KEYS[1])
redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
return had
`;

/**
 * This instance's name in Redis, and its word that it is alive, renewed
 * every 2 s for 6 s: what it leaves behind there (a stream's buffer, a
 * budget hold) names it, so that another instance can tell what a dead
 * one left from what a live one is still working on.
 */
export class InstancePresence {
  /** No '@' or ':' (base64url): it sits inside budget hold names. */
  readonly id = randomBytes(9).toString('base64url');
  private readonly timer: NodeJS.Timeout;
  /** Whether the last word went in on this connection: one then found missing was taken by a FLUSHALL or FLUSHDB. */
  private said = false;
  private readonly lostListeners: (() => void)[] = [];

  constructor(private readonly redis: Redis) {
    redis.defineCommand('gwSayAlive', { numberOfKeys: 1, lua: SAY_ALIVE });
    this.sayAlive();
    this.timer = setInterval(() => this.sayAlive(), ALIVE_EVERY_MS);
    this.timer.unref();
    // A Redis that restarted lost this word: said again as soon as the connection is back, not up to 2 s later,
    // while this instance's new holds there would look like a dead instance's to the others.
    redis.on('ready', () => this.sayAlive());
    redis.on('close', () => {
      this.said = false;
    });
  }

  /**
   * `listener` runs when Redis lost its data under a connection that stayed open (FLUSHALL, FLUSHDB), which fires no
   * reconnect: what this instance keeps there is to be written again (a reconnect writes it again by itself).
   */
  onDataLost(listener: () => void): void {
    this.lostListeners.push(listener);
  }

  private sayAlive(): void {
    const said = this.said;
    (this.redis as unknown as { gwSayAlive(key: string, ttlMs: number): Promise<number> }).gwSayAlive(instanceKey(this.id), ALIVE_TTL_MS).then(
      (had) => {
        this.said = true;
        if (said && had === 0) for (const listener of this.lostListeners) listener();
      },
      () => {
        // Missed: the word may have run out meanwhile, so its absence at the next one tells nothing.
        this.said = false;
      },
    );
  }

  /** Which of these instances are alive (this one always is). */
  async alive(ids: Iterable<string>): Promise<Set<string>> {
    const others = [...new Set(ids)].filter((id) => id !== this.id);
    const live = new Set<string>([this.id]);
    const answers = await Promise.all(others.map((id) => this.redis.exists(instanceKey(id))));
    others.forEach((id, i) => {
      if (answers[i] === 1) live.add(id);
    });
    return live;
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    await this.redis.del(instanceKey(this.id)).catch(() => {});
  }
}
