import type { BudgetLeaseRepo } from '../store/types.js';

/** How often each instance looks for leases that have run out. */
export const LEASE_SWEEP_EVERY_MS = 60_000;
/** Rows deleted by one statement: short row locks, short transactions. */
const SWEEP_BATCH = 500;
/** Batches in one sweep at most (5,000 rows); the rest waits for the next. */
const SWEEP_BATCHES = 10;

/**
 * Deletes the budget leases that have run out, a batch at a time, every
 * `everyMs` (off the request path). A lease's row is otherwise deleted
 * only when its scope leases again, and every lapsed lease and every
 * instance gone leaves one: a deployment with many keys kept them all.
 * Safe with many instances at once (each batch skips rows another holds)
 * and stopped at any point: a lease that has run out counts for nothing,
 * so deleting it moves no money. Returns the stop.
 */
export function scheduleLeaseSweep(leases: BudgetLeaseRepo, everyMs: number, onSwept: (count: number) => void, onError: (err: unknown) => void): () => void {
  let running = false;
  const sweep = async () => {
    if (running) return;
    running = true;
    let total = 0;
    try {
      for (let batch = 0; batch < SWEEP_BATCHES; batch++) {
        const gone = await leases.sweepExpired(SWEEP_BATCH);
        total += gone;
        if (gone < SWEEP_BATCH) break;
      }
    } catch (err) {
      onError(err);
    } finally {
      running = false;
      if (total > 0) onSwept(total);
    }
  };
  const timer = setInterval(() => void sweep(), everyMs);
  timer.unref();
  return () => clearInterval(timer);
}
