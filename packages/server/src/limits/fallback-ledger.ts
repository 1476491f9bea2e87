import type { BudgetLedger, BudgetScope, Reservation, ReserveResult } from './budget-types.js';
import { CircuitBreaker } from './circuit-breaker.js';
import { MemoryLedger } from './memory-ledger.js';

/**
 * The shared ledger while it answers; this instance's own ledger (loaded
 * from the store's totals) while it does not, so budgets still hold per
 * instance when Redis is away.
 */
export class FallbackLedger implements BudgetLedger {
  private readonly local = new MemoryLedger();
  private readonly breaker = new CircuitBreaker(1000);
  private readonly localReservations = new WeakSet<Reservation>();

  constructor(private readonly shared: BudgetLedger) {}

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
    const res = await this.local.reserve(tag, scopes, eur, requestId);
    if (res.ok) this.localReservations.add(res.reservation);
    return res;
  }

  async settle(r: Reservation, actualEur: number): Promise<void> {
    if (this.localReservations.has(r)) return this.local.settle(r, actualEur);
    try {
      await this.shared.settle(r, actualEur);
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
