import type { BudgetHoldRepo } from '../store/types.js';
import { type BudgetLedger, type BudgetScope, RESERVATION_TTL_MS, type Reservation, type ReserveResult, toNano } from './budget-types.js';

/**
 * The budget ledger in the database that every instance shares, for when
 * Redis is away: slower than Redis (one call per reservation and per
 * settle), but one budget for all instances, where each instance's own
 * ledger would let every one of them spend it. Budgets are read from the
 * store itself (the scopes' `limit` is the cached copy of the same).
 */
export class SqlLedger implements BudgetLedger {
  constructor(private readonly holds: BudgetHoldRepo) {}

  async reserve(tag: string, scopes: BudgetScope[], eur: number, requestId: string): Promise<ReserveResult> {
    const nano = toNano(eur);
    const ids = scopes.map((s) => s.id);
    const refused = await this.holds.reserve(ids, nano, requestId, RESERVATION_TTL_MS);
    return refused === null ? { ok: true, reservation: { id: requestId, nano, scopes: ids, tag } } : { ok: false, scope: refused };
  }

  settle(r: Reservation, actualEur: number): Promise<void> {
    return this.holds.settle(r.id, toNano(actualEur));
  }

  release(r: Reservation): Promise<void> {
    return this.holds.settle(r.id, 0);
  }

  /** Not kept here: the store's `spent` is what the admin API shows. */
  async peek(): Promise<{ spent: number; reserved: number } | null> {
    return null;
  }
}
