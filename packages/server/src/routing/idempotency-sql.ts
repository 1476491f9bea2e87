import type { StorePresence } from '../store/presence.js';
import type { IdempotencyRepo } from '../store/types.js';
import type { IdempotencyBackend, IdempotencyEntry, StoredAnswer } from './idempotency-types.js';

const SWEEP_EVERY_MS = 10 * 60_000;
/** How long a lost claim (billed, its answer never kept) answers its key: as long as an answer would have. */
const LOST_TTL_MS = 24 * 60 * 60 * 1000;

/** Idempotency in the store (PGlite or PostgreSQL): for one instance, or many sharing one PostgreSQL without Redis. */
export class SqlIdempotencyBackend implements IdempotencyBackend {
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly repo: IdempotencyRepo,
    /** Instances sharing PostgreSQL without Redis: a claim whose instance died is taken over (see claim). */
    private readonly presence: StorePresence | null = null,
  ) {
    this.sweeper = setInterval(() => {
      repo.sweep().catch(() => {
        // Expired rows are also taken over by the next claim; the sweep only keeps the table small.
      });
    }, SWEEP_EVERY_MS);
    this.sweeper.unref();
  }

  async claim(scope: string, fingerprint: string, owner: string, ttlMs: number): Promise<IdempotencyEntry | null> {
    for (let attempt = 0; attempt < 5; attempt++) {
      const row = await this.repo.claim({ scope, fingerprint, owner }, ttlMs);
      // No row: the holder's claim ran out between the two reads; try again.
      if (!row) continue;
      if (row.owner === owner && row.state === 'pending') return null;
      if (row.state === 'lost') return { state: 'lost', fingerprint: row.fingerprint };
      // Its instance was killed: its request died with it, and a repeat runs rather than wait out the claim's TTL, as
      // with Redis. Unless it was billed (its usage record is stored): its answer is lost, and running it again would
      // bill it twice, so the key answers a final error instead.
      const dead = row.state === 'pending' && row.fingerprint === fingerprint ? await this.deadRequest(row.owner) : null;
      if (dead !== null) {
        const took = await this.repo.takeOverDead(scope, row.owner, dead, owner, ttlMs, LOST_TTL_MS);
        if (took === 'taken') return null;
        if (took === 'billed') return { state: 'lost', fingerprint: row.fingerprint };
        continue;
      }
      return row.state === 'done'
        ? { state: 'done', fingerprint: row.fingerprint, answer: row.answer as StoredAnswer }
        : { state: 'pending', fingerprint: row.fingerprint };
    }
    throw new Error('idempotency claim kept racing with expiring claims');
  }

  /** The request id of a claim (`<request id>@<instance>`) whose instance no longer says it is alive, else null. */
  private async deadRequest(claimOwner: string): Promise<string | null> {
    const at = claimOwner.indexOf('@');
    if (this.presence === null || at < 0) return null;
    const instance = claimOwner.slice(at + 1);
    return (await this.presence.alive(instance)) ? null : claimOwner.slice(0, at);
  }

  async refresh(scope: string, owner: string, ttlMs: number): Promise<void> {
    await this.repo.refresh(scope, owner, ttlMs);
  }

  async complete(scope: string, owner: string, answer: StoredAnswer, ttlMs: number): Promise<void> {
    await this.repo.complete(scope, owner, answer, ttlMs);
  }

  async release(scope: string, owner: string): Promise<void> {
    await this.repo.release(scope, owner);
  }

  async drop(scope: string, owner: string): Promise<void> {
    await this.repo.drop(scope, owner);
  }

  async forgetStream(scope: string, streamId: string): Promise<void> {
    await this.repo.forgetStream(scope, streamId);
  }

  async close(): Promise<void> {
    clearInterval(this.sweeper);
  }
}
