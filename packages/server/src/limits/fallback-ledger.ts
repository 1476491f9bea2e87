import type { BudgetLedger, BudgetScope, Reservation, ReserveResult } from './budget-types.js';
import { CircuitBreaker } from './circuit-breaker.js';
import { MemoryLedger } from './memory-ledger.js';

/**
 * The shared ledger (Redis) while it answers. While it does not, leases in
 * the database (`database`, with PostgreSQL), which every instance shares
 * too, so a budget still holds across instances; and only while that is
 * away as well, this instance's own ledger (loaded from the store's
 * totals), which holds a budget per instance.
 */
export class FallbackLedger implements BudgetLedger {
  private readonly local = new MemoryLedger();
  private readonly breaker = new CircuitBreaker(1000);
  private readonly databaseBreaker = new CircuitBreaker(1000);
  /** Reservations not made in the shared ledger, by the ledger that holds them. */
  private readonly heldBy = new WeakMap<Reservation, BudgetLedger>();

  constructor(
    private readonly shared: BudgetLedger,
    private readonly database: BudgetLedger | null = null,
  ) {}

  async reserve(tag: string, scopes: BudgetScope[], eur: number, requestId: string): Promise<ReserveResult> {
    if (this.breaker.allow()) {
      try {
        const res = await this.shared.reserve(tag, scopes, eur, requestId);
        this.breaker.success();
        return res;
      } catch {
        this.breaker.failure();
      }
    }
    if (this.database && this.databaseBreaker.allow()) {
      try {
        const res = await this.database.reserve(tag, scopes, eur, requestId);
        this.databaseBreaker.success();
        if (res.ok) this.heldBy.set(res.reservation, this.database);
        return res;
      } catch {
        this.databaseBreaker.failure();
      }
    }
    const res = await this.local.reserve(tag, scopes, eur, requestId);
    if (res.ok) this.heldBy.set(res.reservation, this.local);
    return res;
  }

  async settle(r: Reservation, actualEur: number): Promise<void> {
    const ledger = this.heldBy.get(r) ?? this.shared;
    try {
      await ledger.settle(r, actualEur);
    } catch {
      // The hold expires by itself; the spend reaches the store through the usage record.
    }
  }

  async release(r: Reservation): Promise<void> {
    return this.settle(r, 0);
  }

  peek(tag: string, scopeId: string): Promise<{ spent: number; reserved: number } | null> {
    return this.shared.peek(tag, scopeId);
  }
}
