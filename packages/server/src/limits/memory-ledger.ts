import { steadyMs } from '../lib/clock.js';
import {
  type BudgetLedger,
  type BudgetScope,
  fromNano,
  limitNano,
  RESERVATION_TTL_MS,
  type Reservation,
  type ReserveResult,
  renewalDue,
  renewalTimer,
  toNano,
} from './budget-types.js';

interface Account {
  spent: number;
  /**
   * `at`: when taken; `until`: when it lapses unless renewed (its request still running). Monotonic (steadyMs): a step
   * forward of the wall clock past a hold's life let the room of requests still running be admitted again.
   */
  held: Map<string, { nano: number; at: number; until: number }>;
  /** The sum of `held`, kept as holds come and go, so a reservation does not walk every hold in flight. */
  heldSum: number;
  /** When (monotonic) expired holds (of requests that never settled) are next swept out. */
  nextSweep: number;
  /** When it was last reserved on or settled (Date.now()). */
  usedAt: number;
}

const SWEEP_EVERY_MS = 1_000;

/**
 * A total unused this long, whose costs are all in the store, leaves memory (about 550 B each, one per budgeted key or
 * workspace ever served: a revoked, deleted or forgotten key's stayed for the process's life); its next use reads it
 * from the store again.
 */
export const BUDGET_IDLE_MS = 10 * 60_000;

export interface MemoryLedgerOptions {
  /** A time (Date.now()) before which every settled cost is in the store's spend (UsageWriter.storedBefore); without it, totals stay. */
  storedBefore?: () => number;
  idleMs?: number;
}

/** The budget ledger in process memory (one instance). */
export class MemoryLedger implements BudgetLedger {
  private readonly accounts = new Map<string, Account>();
  private readonly loading = new Map<string, Promise<Account>>();

  private readonly renewal: NodeJS.Timeout;
  private eviction: NodeJS.Timeout | null = null;

  /** `flushUsage`: writes this instance's pending usage records, so that the store's totals have their costs. */
  constructor(
    private readonly flushUsage: () => Promise<void> = async () => {},
    private readonly holdTtlMs = RESERVATION_TTL_MS,
    private readonly options: MemoryLedgerOptions = {},
  ) {
    this.renewal = renewalTimer(holdTtlMs, () => this.renewOld());
  }

  /** Started with the first total: none is there to drop before (and what storedBefore reads may not be made yet). */
  private startEviction(): void {
    if (this.eviction !== null || !this.options.storedBefore) return;
    this.eviction = setInterval(() => this.evictIdle(), Math.max(1, Math.floor((this.options.idleMs ?? BUDGET_IDLE_MS) / 4)));
    this.eviction.unref();
  }

  stop(): void {
    clearInterval(this.renewal);
    if (this.eviction) clearInterval(this.eviction);
  }

  /**
   * Drops totals without holds, unused for the idle time, whose last cost the store has (its usage record written):
   * read again from the store, such a total is exact. One with a cost still on its way there stays until the next sweep.
   */
  private evictIdle(): void {
    const now = Date.now();
    const idleBefore = now - (this.options.idleMs ?? BUDGET_IDLE_MS);
    const storedBefore = this.options.storedBefore?.() ?? 0;
    for (const [id, acc] of this.accounts) {
      if (acc.usedAt >= idleBefore || acc.usedAt >= storedBefore) continue;
      heldNano(acc, steadyMs());
      if (acc.held.size === 0) this.accounts.delete(id);
    }
  }

  /** Every hold here is of this process's requests, unsettled so still running: each lives on (see renewalDue). */
  private renewOld(): void {
    const now = steadyMs();
    for (const acc of this.accounts.values()) {
      for (const hold of acc.held.values()) {
        if (renewalDue(hold.at, hold.until - this.holdTtlMs, this.holdTtlMs, now)) hold.until = now + this.holdTtlMs;
      }
    }
  }

  /** A total kept from before the scope had no budget lacks what it spent meanwhile (only the store has it). */
  async budgetSet(_tag: string, scope: BudgetScope): Promise<void> {
    if (!this.accounts.has(scope.id)) return;
    await this.flushUsage().catch(() => {});
    const stored = toNano(await scope.loadSpent());
    // Read again after the await: a reservation may have made the account meanwhile.
    const acc = this.accounts.get(scope.id);
    if (acc && stored > acc.spent) acc.spent = stored;
  }

  reserve(tag: string, scopes: BudgetScope[], eur: number, requestId: string): Promise<ReserveResult> {
    const accounts: Account[] = [];
    for (const scope of scopes) {
      const acc = this.accounts.get(scope.id);
      if (!acc) return this.reserveAfterLoading(tag, scopes, eur, requestId);
      accounts.push(acc);
    }
    // Every account known (the usual case): no wait, and no promise but the answer's.
    return Promise.resolve(this.hold(tag, scopes, accounts, eur, requestId));
  }

  private async reserveAfterLoading(tag: string, scopes: BudgetScope[], eur: number, requestId: string): Promise<ReserveResult> {
    for (;;) {
      const accounts = await Promise.all(scopes.map((s) => this.account(s)));
      // One known before the wait may have been dropped as idle meanwhile: a hold on it would count nowhere.
      if (accounts.every((acc, i) => this.accounts.get((scopes[i] as BudgetScope).id) === acc)) return this.hold(tag, scopes, accounts, eur, requestId);
    }
  }

  /** The check and the hold, in one synchronous step. */
  private hold(tag: string, scopes: BudgetScope[], accounts: Account[], eur: number, requestId: string): ReserveResult {
    const nano = toNano(eur);
    const now = steadyMs();
    for (let i = 0; i < scopes.length; i++) {
      const scope = scopes[i] as BudgetScope;
      const acc = accounts[i] as Account;
      if (scope.limit === null) continue;
      const limit = limitNano(scope.limit);
      if (acc.spent >= limit || acc.spent + heldNano(acc, now) + nano > limit) return { ok: false, scope: scope.id };
    }
    // Its use is on the wall clock, as `storedBefore` it is compared with.
    const usedAt = Date.now();
    for (const acc of accounts) {
      dropHold(acc, requestId);
      acc.held.set(requestId, { nano, at: now, until: now + this.holdTtlMs });
      acc.heldSum += nano;
      acc.usedAt = usedAt;
    }
    return { ok: true, reservation: { id: requestId, nano, scopes: scopes.map((s) => s.id), tag } };
  }

  async settle(r: Reservation, actualEur: number): Promise<void> {
    // Its usage record is made in the same run of code, after this: in the store once storedBefore is past this time.
    const now = Date.now();
    for (const id of r.scopes) {
      const acc = this.accounts.get(id);
      if (!acc) continue;
      dropHold(acc, r.id);
      acc.spent += toNano(actualEur);
      acc.usedAt = now;
    }
  }

  async release(r: Reservation): Promise<void> {
    for (const id of r.scopes) {
      const acc = this.accounts.get(id);
      if (acc) dropHold(acc, r.id);
    }
  }

  async peek(_tag: string, scopeId: string): Promise<{ spent: number; reserved: number } | null> {
    const acc = this.accounts.get(scopeId);
    return acc ? { spent: fromNano(acc.spent), reserved: fromNano(heldNano(acc, steadyMs())) } : null;
  }

  private account(scope: BudgetScope): Promise<Account> {
    const have = this.accounts.get(scope.id);
    if (have) return Promise.resolve(have);
    let loading = this.loading.get(scope.id);
    if (!loading) {
      loading = scope.loadSpent().then((spent) => {
        const acc = this.accounts.get(scope.id) ?? { spent: toNano(spent), held: new Map(), heldSum: 0, nextSweep: 0, usedAt: Date.now() };
        this.accounts.set(scope.id, acc);
        this.loading.delete(scope.id);
        this.startEviction();
        return acc;
      });
      loading.catch(() => this.loading.delete(scope.id));
      this.loading.set(scope.id, loading);
    }
    return loading;
  }
}

function heldNano(acc: Account, now: number): number {
  if (now >= acc.nextSweep) {
    acc.nextSweep = now + SWEEP_EVERY_MS;
    for (const [id, h] of acc.held) if (h.until <= now) dropHold(acc, id);
  }
  return acc.heldSum;
}

function dropHold(acc: Account, id: string): void {
  const h = acc.held.get(id);
  if (!h) return;
  acc.held.delete(id);
  acc.heldSum -= h.nano;
}
