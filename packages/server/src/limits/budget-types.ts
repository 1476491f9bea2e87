/** EUR amounts are kept as integer nano-euros so that sums are exact. */
export const NANO = 1_000_000_000;
/**
 * Budgets and costs are kept to 1e-12 EUR (the store's `numeric(24, 12)`, each usage record's cost rounded to it),
 * finer than a nano-euro: a hold or a cost is rounded up to the nano-euro and a budget down, so that rounding never
 * admits a request past a budget's end (a budget of €0.0019 less 1e-12 admitted a request of worst case €0.0019).
 * Rounded to 1e-12 first, so that a float's noise (0.0019 * 1e9 = 1900000.0000000002) adds no nano-euro.
 */
const PICO_PER_NANO = 1000;
const toPico = (eur: number): number => Math.round(eur * NANO * PICO_PER_NANO);
export const toNano = (eur: number): number => Math.ceil(toPico(eur) / PICO_PER_NANO);
export const limitNano = (eur: number): number => Math.floor(toPico(eur) / PICO_PER_NANO);
export const fromNano = (nano: number): number => nano / NANO;

/**
 * Neither Redis nor the database can hold a budget right now: the request is refused, to be retried. Says what
 * failed in each (`redis`, `database`): a refusal while only Redis stalled was logged as the store being unreachable.
 */
export class BudgetsUnavailableError extends Error {
  constructor(
    readonly redis: unknown,
    readonly database: unknown,
  ) {
    super('neither Redis nor the database could hold the budget', { cause: database });
  }
}

/** One budget a request is held to: its key's or its workspace's. */
export interface BudgetScope {
  /** `key:<id>` or `ws:<id>`. */
  id: string;
  /** EUR; null: unlimited (still tracked). */
  limit: number | null;
  /** Changes whenever the budget is set or removed: room leased under an earlier budget is given back. */
  seq?: number;
  /** Reads the durable spent total (EUR) when the ledger first meets this scope. */
  loadSpent: () => Promise<number>;
  /** The room instances hold in the database's leases (nano-EUR) and how long the longest of them lives (ms). */
  loadLeased?: () => Promise<{ nano: number; ms: number }>;
}

export interface Reservation {
  id: string;
  nano: number;
  scopes: string[];
  /** Hash tag shared by the scopes, so one Redis script can touch them all. */
  tag: string;
}

/** The shared ledger's answer while an instance still adds to its totals what it spent without it: nothing held. */
export const RECONCILING = 'reconciling';

export type ReserveResult = { ok: true; reservation: Reservation } | { ok: false; scope: string };

/**
 * Budgets that cannot be overspent by concurrency: a request atomically
 * reserves its worst-case cost against what is left (refused when it does
 * not fit), then settles to its real cost or releases the reservation.
 */
export interface BudgetLedger {
  reserve(tag: string, scopes: BudgetScope[], eur: number, requestId: string): Promise<ReserveResult>;
  settle(reservation: Reservation, actualEur: number): Promise<void>;
  release(reservation: Reservation): Promise<void>;
  /** Spent and reserved EUR of a scope, as the ledger sees it now. */
  peek(tag: string, scopeId: string): Promise<{ spent: number; reserved: number } | null>;
  /**
   * For a refusal that holds cause: in how many ms holds of `scopeId` of at least `nano` in all can be let go at the
   * latest as far as the ledger knows, or null where it cannot say (the refusal then says 1 s).
   */
  roomBackInMs?(tag: string, scopeId: string, nano: number): Promise<number | null>;
  /**
   * A budget was set on `scope`, which may have had none: costs made meanwhile are in the store's total only. Brings
   * the ledger's total up to the store's (never down), once this instance's usage records are written, and again
   * later, once every instance's are.
   */
  budgetSet?(tag: string, scope: BudgetScope): Promise<void>;
  /** The hold of a request still running lives another hold's life from now (a stream may run longer than one). */
  renew?(r: Reservation): Promise<void>;
}

/** How long a reservation holds before it is presumed lost (its instance crashed). */
export const RESERVATION_TTL_MS = 15 * 60_000;

/**
 * A stream may run longer than a hold lives (a slow provider, its client's grace): once its hold lapsed, its room was
 * admitted a second time while it still ran, and the budget was overspent by its cost. So the holds of requests still
 * running are renewed once a third of their life has passed, by one timer per ledger, for at most this long: past it,
 * a hold whose request never settled (a fault) lets its room go.
 */
const MAX_RENEWED_MS = 24 * 3600_000;

/** Whether a hold taken at `takenAt`, its life last begun at `renewedAt`, is to be renewed now. */
export function renewalDue(takenAt: number, renewedAt: number, lifeMs: number, now: number): boolean {
  return now - renewedAt >= lifeMs / 3 && now - takenAt < MAX_RENEWED_MS;
}

/** Calls `renewOld` every sixth of a hold's life; returns the timer (unref'd), for the ledger's stop. */
export function renewalTimer(lifeMs: number, renewOld: () => void): NodeJS.Timeout {
  const timer = setInterval(renewOld, Math.max(1, Math.floor(lifeMs / 6)));
  timer.unref();
  return timer;
}

/**
 * How long after Redis lost its totals (it died, restarted, or was flushed) every instance has written the usage records
 * of the costs Redis took before: its writer's interval, and this margin for a batch insert on a busy database. Until
 * then a total or a lease read from the store lacks them, so neither is counted on before.
 */
export const lastCostsStoredAfterMs = (usageFlushMs: number): number => usageFlushMs + 500;
