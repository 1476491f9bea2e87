import type { IdempotencyRepo } from '../store/types.js';
import type { IdempotencyBackend, IdempotencyEntry, StoredAnswer } from './idempotency-types.js';

const SWEEP_EVERY_MS = 10 * 60_000;

/** Idempotency in the store (PGlite or PostgreSQL): for one instance, or many sharing one PostgreSQL without Redis. */
export class SqlIdempotencyBackend implements IdempotencyBackend {
  private readonly sweeper: NodeJS.Timeout;

  constructor(private readonly repo: IdempotencyRepo) {
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
      return row.state === 'done'
        ? { state: 'done', fingerprint: row.fingerprint, answer: row.answer as StoredAnswer }
        : { state: 'pending', fingerprint: row.fingerprint };
    }
    throw new Error('idempotency claim kept racing with expiring claims');
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
