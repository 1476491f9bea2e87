import { type BudgetLedger, type BudgetScope, RESERVATION_TTL_MS, type Reservation, type ReserveResult } from './budget-types.js';

/** The longest a request's hold is kept alive: past it, a hold its request never settled (a fault) lets its room go. */
const MAX_RENEWED_MS = 24 * 3600_000;

/**
 * A ledger whose holds live as long as their requests run: a hold expires {@link RESERVATION_TTL_MS} after it was
 * taken (so that one its instance lost does not keep its room), and a stream may run longer (its client's grace,
 * a slow provider): once its hold expired, its room was admitted a second time while it still ran, and the budget
 * was overspent by its cost. Each hold older than a third of its life is renewed, by one timer for all of them.
 */
export class RenewingLedger implements BudgetLedger {
  /** The holds not yet settled, with when each was taken or last renewed (Date.now()). */
  private readonly live = new Map<Reservation, { takenAt: number; renewedAt: number }>();
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly inner: BudgetLedger,
    private readonly lifeMs = RESERVATION_TTL_MS,
  ) {
    this.timer = setInterval(() => this.renewOld(), Math.max(1, Math.floor(lifeMs / 6)));
    this.timer.unref();
  }

  async reserve(tag: string, scopes: BudgetScope[], eur: number, requestId: string): Promise<ReserveResult> {
    const res = await this.inner.reserve(tag, scopes, eur, requestId);
    if (res.ok) {
      const now = Date.now();
      this.live.set(res.reservation, { takenAt: now, renewedAt: now });
    }
    return res;
  }

  settle(r: Reservation, actualEur: number): Promise<void> {
    this.live.delete(r);
    return this.inner.settle(r, actualEur);
  }

  release(r: Reservation): Promise<void> {
    this.live.delete(r);
    return this.inner.release(r);
  }

  peek(tag: string, scopeId: string): Promise<{ spent: number; reserved: number } | null> {
    return this.inner.peek(tag, scopeId);
  }

  roomBackInMs(tag: string, scopeId: string, nano: number): Promise<number | null> {
    return this.inner.roomBackInMs?.(tag, scopeId, nano) ?? Promise.resolve(null);
  }

  budgetSet(tag: string, scope: BudgetScope): Promise<void> {
    return this.inner.budgetSet?.(tag, scope) ?? Promise.resolve();
  }

  renew(r: Reservation): Promise<void> {
    return this.inner.renew?.(r) ?? Promise.resolve();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  private renewOld(): void {
    const now = Date.now();
    for (const [r, times] of this.live) {
      if (now - times.takenAt > MAX_RENEWED_MS) {
        this.live.delete(r);
        continue;
      }
      if (now - times.renewedAt < this.lifeMs / 3) continue;
      times.renewedAt = now;
      this.renew(r).catch(() => {});
    }
  }
}
