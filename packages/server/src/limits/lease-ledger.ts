import { randomBytes } from 'node:crypto';
import { steadyMs } from '../lib/clock.js';
import type { BudgetLeaseRepo } from '../store/types.js';
import type { BudgetLedger, BudgetScope, Reservation, ReserveResult } from './budget-types.js';
import { fromNano, limitNano, toNano } from './budget-types.js';

/** How long a lease counts in the database unless renewed (an instance that died gives its leases back after this). */
export const LEASE_TTL_MS = 30_000;
/** This instance stops counting on a lease this long before its last renewal runs out. */
const LEASE_MARGIN_MS = 10_000;
/** A lease grows by room for this many requests like the one that needs it, or what is left if less. */
const LEASE_REQUESTS = 64;
/** Room not used for this long goes back to the database, for the other instances. */
const IDLE_RETURN_MS = 5_000;
const TEND_EVERY_MS = 1_000;
/**
 * A request refused room that other instances' leases hold (near a budget's
 * end, room they give back after their next settle) asks again after this
 * long, then after twice as long each time (25, 50, 100, 200 ms)...
 */
const HELD_RETRY_MS = 25;
/** ...as long as it has waited no more than this in all; then it is refused. */
export const HELD_WAIT_MS = 400;
/** What the database answered a grow: room added, none in the budget, or room other instances' leases hold. */
type Grown = 'grown' | 'spent' | 'held';

export interface LeaseLedgerOptions {
  /** A time before which every usage record made is stored (so its cost is in `spent`). */
  storedBefore: () => number;
  /** The clock of settled costs' times: the one `storedBefore` is on (the usage writer's, the wall clock). */
  now?: () => number;
  /** The clock of what only this instance judges (a lease's validity, its room's last use): monotonic. */
  steady?: () => number;
}

interface ScopeLease {
  /** The lease's row in the database (a new one after a lease lapsed). */
  leaseId: string;
  /** What this instance holds in its lease. */
  leased: number;
  /** The worst cases of the requests admitted and not yet settled. */
  inflight: number;
  /** Costs settled but perhaps not yet in `spent`: still counted in the lease. */
  settled: { at: number; nano: number }[];
  settledSum: number;
  /** The scope's budget (nano-EUR) as last met here: a lower one gives back the room leased under the higher one. */
  limit: number;
  /** Its {@link BudgetScope.seq} as last met here: a budget changed since gives back the room leased under the old one. */
  seq: number | undefined;
  /** Until when (this instance's monotonic clock) the lease is known to live in the database. */
  validUntil: number;
  lastUse: number;
  growing: Promise<Grown> | null;
  tending: boolean;
  /**
   * Its last grow got less than it asked for: the budget is near its end,
   * and what the lease holds unused (a request's worst case less its real
   * cost, once settled) goes back after each settle, so that no room sits
   * idle in one instance's lease while another is refused.
   */
  tight: boolean;
  /**
   * A give-back after a settle (tight) found the lease busy (a grow or a
   * shrink in flight): made when it is no longer, rather than left in the
   * lease until the next settle while other instances wait for that room.
   */
  backLater: boolean;
  /** A tend found the lease busy (a shrink in flight): tended again when it is not, for costs stored meanwhile. */
  tendLater: boolean;
}

/**
 * Budgets held in the database every instance shares, for when Redis is
 * away, without a database call per request. Each instance leases a slice
 * of a scope's room (room for {@link LEASE_REQUESTS} requests like the one
 * at hand, or what is left) and admits requests from it in memory,
 * growing the lease when it runs out. The leases never add up to more than
 * the budget less the stored spend, so neither does what the instances
 * admit. Costs stay in the lease until their usage records are stored
 * (then they are in `spent`); room unused for {@link IDLE_RETURN_MS} goes
 * back. A lease is renewed while used and lapses {@link LEASE_TTL_MS} after
 * its instance stops. Near a budget's end, room one instance leased is
 * refused to the others until it comes back: a request that finds the room
 * it needs held by other leases waits for it (at most {@link HELD_WAIT_MS});
 * one that no give-back could make room for is refused at once.
 */
export class LeaseLedger implements BudgetLedger {
  private readonly scopes = new Map<string, ScopeLease>();
  /** Scopes whose lease lacks holds or costs taken over from another ledger ({@link cover}). */
  private readonly uncovered = new Set<string>();
  private readonly instance = randomBytes(6).toString('hex');
  private generation = 0;
  private timer: NodeJS.Timeout | null = null;
  private readonly now: () => number;
  private readonly steady: () => number;

  constructor(
    private readonly leases: BudgetLeaseRepo,
    private readonly options: LeaseLedgerOptions,
  ) {
    this.now = options.now ?? Date.now;
    // A step of the wall clock must not move a lease's validity: back, it counted on a lease the database had let
    // lapse (and left it unrenewed); forward, it let go of every lease at once, whose rows held their room 30 s more.
    this.steady = options.steady ?? steadyMs;
  }

  async reserve(tag: string, scopes: BudgetScope[], eur: number, requestId: string): Promise<ReserveResult> {
    const nano = toNano(eur);
    const taken: ScopeLease[] = [];
    const undo = () => {
      for (const t of taken) t.inflight -= nano;
    };
    // A scope without a budget has nothing to hold.
    const limited = scopes.filter((s) => s.limit !== null);
    for (const scope of limited) {
      const state = this.state(scope.id);
      const limit = limitNano(scope.limit as number);
      // Lowered (PATCH) while this instance leases, or removed and set again (what was spent meanwhile reached only
      // `spent`, not the leases): the room it leased under the old budget is not counted on.
      if (limit < state.limit || (scope.seq !== state.seq && state.seq !== undefined)) this.giveBackUnused(scope.id, state, true);
      state.limit = limit;
      state.seq = scope.seq;
      let admitted: boolean;
      try {
        admitted = await this.take(scope.id, state, nano);
      } catch (err) {
        undo();
        throw err;
      }
      if (!admitted) {
        undo();
        return { ok: false, scope: scope.id };
      }
      taken.push(state);
    }
    return { ok: true, reservation: { id: requestId, nano, scopes: limited.map((s) => s.id), tag } };
  }

  async settle(r: Reservation, actualEur: number): Promise<void> {
    const actual = toNano(actualEur);
    const at = this.now();
    for (const id of r.scopes) {
      const state = this.scopes.get(id);
      if (!state) continue;
      state.inflight -= r.nano;
      if (actual > 0) {
        state.settled.push({ at, nano: actual });
        state.settledSum += actual;
      }
      if (state.tight) this.giveBackUnused(id, state);
    }
  }

  release(r: Reservation): Promise<void> {
    return this.settle(r, 0);
  }

  /**
   * Counts in this instance's leases the hold of a request already running,
   * admitted by another ledger (Redis, now away), so that what is admitted
   * here after it does not take its room. Never refused: its request runs
   * either way. Counted at once (a settle before the database answers finds
   * it); {@link cover} then puts it in the database. Settled as any other.
   */
  adoptRunning(tag: string, scopeIds: string[], nano: number, requestId: string): Reservation {
    for (const id of scopeIds) {
      const state = this.current(id);
      state.inflight += nano;
      this.uncovered.add(id);
    }
    return { id: requestId, nano, scopes: scopeIds, tag };
  }

  storedBefore(): number {
    return this.options.storedBefore();
  }

  /** Counts a cost settled in another ledger that may not be in `spent` yet (its usage record was made at `at`), as a settle here does. */
  adoptSettled(scopeIds: string[], nano: number, at: number): void {
    if (nano <= 0 || at < this.options.storedBefore()) return;
    for (const id of scopeIds) {
      const state = this.current(id);
      // In the order of their records: costs leave from the front once stored.
      const after = state.settled.findIndex((c) => c.at > at);
      state.settled.splice(after < 0 ? state.settled.length : after, 0, { at, nano });
      state.settledSum += nano;
      this.uncovered.add(id);
    }
  }

  /**
   * Adds to each lease what the holds and costs taken over lack beyond the
   * room it held unused, whatever the budget has left: room beyond the
   * budget leaves none for any instance's grow until it is settled, stored
   * and given back. Resolves when tried; what failed is tried again by
   * {@link tend}.
   */
  async cover(): Promise<void> {
    await Promise.all([...this.uncovered].map((id) => this.coverScope(id)));
  }

  private async coverScope(id: string): Promise<void> {
    const state = this.scopes.get(id);
    if (!state) {
      this.uncovered.delete(id);
      return;
    }
    // One change of a lease at a time: a grow in flight first (its room counts), and requests wait for this one.
    while (state.growing) await state.growing.catch(() => 'spent');
    this.uncovered.delete(id);
    const lacking = state.inflight + state.settledSum - state.leased;
    if (lacking <= 0) return;
    const leaseId = state.leaseId;
    const now = this.steady();
    state.growing = this.leases.add(id, leaseId, lacking, LEASE_TTL_MS).then(
      () => {
        if (state.leaseId !== leaseId) {
          this.uncovered.add(id);
          return 'grown';
        }
        state.leased += lacking;
        state.validUntil = now + LEASE_TTL_MS - LEASE_MARGIN_MS;
        // The budget may have no room for it: what it holds unused goes back after each settle, as near a budget's end.
        state.tight = true;
        return 'grown';
      },
      () => {
        this.uncovered.add(id);
        return 'grown';
      },
    );
    state.growing = state.growing.finally(() => {
      state.growing = null;
    });
    this.timer ??= setInterval(() => void this.tend(), TEND_EVERY_MS).unref();
    await state.growing;
  }

  /** Not kept here: the store's `spent` is what the admin API shows. */
  async peek(): Promise<{ spent: number; reserved: number } | null> {
    return null;
  }

  /**
   * What is spent (stored, and this instance's costs not stored yet) and what the leases hold besides (the worst cases
   * of requests in flight, room leased unused, and other instances' costs not stored yet), in EUR.
   */
  async peekScope(scope: BudgetScope): Promise<{ spent: number; reserved: number }> {
    const [stored, leased] = await Promise.all([scope.loadSpent(), scope.loadLeased?.() ?? Promise.resolve({ nano: 0, ms: 0 })]);
    const state = this.scopes.get(scope.id);
    const storedBefore = this.options.storedBefore();
    let unstored = 0;
    for (const cost of state?.settled ?? []) if (cost.at >= storedBefore) unstored += cost.nano;
    return { spent: stored + fromNano(unstored), reserved: fromNano(Math.max(0, leased.nano - unstored)) };
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  private state(id: string): ScopeLease {
    let state = this.scopes.get(id);
    if (!state) {
      state = {
        leaseId: this.newLeaseId(),
        leased: 0,
        inflight: 0,
        settled: [],
        settledSum: 0,
        limit: Number.POSITIVE_INFINITY,
        seq: undefined,
        validUntil: 0,
        lastUse: 0,
        growing: null,
        tending: false,
        tight: false,
        backLater: false,
        tendLater: false,
      };
      this.scopes.set(id, state);
    }
    return state;
  }

  /** The scope's state, its lease let go first if it may have run out. */
  private current(id: string): ScopeLease {
    const state = this.state(id);
    if (state.leased > 0 && this.steady() >= state.validUntil) this.lapse(state);
    return state;
  }

  private newLeaseId(): string {
    return `lease:${this.instance}:${++this.generation}`;
  }

  /** Counts `nano` in the scope's lease, growing it when it lacks room; false when the database has none left. */
  private async take(id: string, state: ScopeLease, nano: number): Promise<boolean> {
    let waited = 0;
    for (;;) {
      const now = this.steady();
      state.lastUse = now;
      if (state.leased > 0 && now >= state.validUntil) this.lapse(state);
      if (state.leased - state.inflight - state.settledSum >= nano) {
        state.inflight += nano;
        return true;
      }
      if (state.growing) {
        await state.growing;
        continue;
      }
      // A give-back or a take-off of stored costs on its way (now or when the database answers): the database may
      // count more in this lease than is left, or costs both in it and in the spend.
      const shrinking = state.tending;
      state.growing = this.grow(id, state, nano).finally(() => {
        state.growing = null;
      });
      const grown = await state.growing;
      if (grown === 'grown') {
        // A settle meanwhile left room to give back: this request's share first, then the rest goes.
        if (state.backLater && state.leased - state.inflight - state.settledSum >= nano) {
          state.inflight += nano;
          this.whenIdle(id, state);
          return true;
        }
        continue;
      }
      // Unused room goes back at once, for another instance to put together with its own remainder.
      this.giveBackUnused(id, state);
      // Room other instances hold comes back after their next settle (near the end), as does this one's own room
      // on its way back: wait for it a little, rather than refuse a request the budget has room for. A budget
      // spent (no room even with every other lease given back) is refused at once.
      const pause = waited + HELD_RETRY_MS;
      if ((grown === 'held' || shrinking || state.tending) && waited + pause <= HELD_WAIT_MS) {
        waited += pause;
        await new Promise((resolve) => setTimeout(resolve, pause));
        continue;
      }
      return false;
    }
  }

  /**
   * What this lease holds unused goes back at once: when the database had
   * no room for a request (the remainder was less than it needed), so that
   * another instance whose own remainder falls short can put the two
   * together; after each settle near a budget's end (`tight`); and when the
   * budget was lowered (`evenWhileBusy`: that room must not be used, whatever
   * else is on its way to the database).
   */
  private giveBackUnused(id: string, state: ScopeLease, evenWhileBusy = false): void {
    const unused = state.leased - state.inflight - state.settledSum;
    if (unused <= 0) {
      state.backLater = false;
      return;
    }
    if (!evenWhileBusy && (state.growing || state.tending)) {
      state.backLater = true;
      return;
    }
    state.backLater = false;
    state.leased -= unused;
    const leaseId = state.leaseId;
    const mine = !state.tending;
    state.tending = true;
    this.leases
      .shrink(id, leaseId, unused, LEASE_TTL_MS)
      .then((kept) => {
        if (state.leaseId === leaseId && !kept) this.lapse(state);
      })
      .catch(() => {
        // The database keeps more than this instance counts on, which only holds others back.
      })
      .finally(() => {
        if (!mine) return;
        state.tending = false;
        this.whenIdle(id, state);
      });
  }

  /**
   * What was left for when the lease is no longer busy: costs stored
   * meanwhile, which count twice (in `spent` and in the lease) until taken
   * off, and a give-back after a settle ({@link ScopeLease.backLater}).
   */
  private whenIdle(id: string, state: ScopeLease): void {
    if (state.tendLater) {
      state.tendLater = false;
      void this.tend();
    }
    if (state.backLater) this.giveBackUnused(id, state);
  }

  /**
   * A lease not renewed in time may have run out in the database: it is
   * left to expire there, and what it covered must be covered anew, by a
   * new row. Costs settled meanwhile are in `spent` or on their way.
   */
  private lapse(state: ScopeLease): void {
    state.leaseId = this.newLeaseId();
    state.leased = 0;
    state.settled = [];
    state.settledSum = 0;
  }

  private async grow(id: string, state: ScopeLease, nano: number): Promise<Grown> {
    const need = nano - (state.leased - state.inflight - state.settledSum);
    const leaseId = state.leaseId;
    // Costs settled here stay in the lease until stored, and may be in `spent` already: counted twice meanwhile.
    const granted = await this.leases.grow(id, leaseId, need, need + (LEASE_REQUESTS - 1) * nano, LEASE_TTL_MS, state.settledSum);
    if (granted <= 0) return granted < 0 ? 'held' : 'spent';
    state.tight = granted < need + (LEASE_REQUESTS - 1) * nano;
    if (state.leaseId === leaseId) {
      state.leased += granted;
      state.validUntil = this.steady() + LEASE_TTL_MS - LEASE_MARGIN_MS;
    }
    this.timer ??= setInterval(() => void this.tend(), TEND_EVERY_MS).unref();
    return 'grown';
  }

  /** Takes stored costs and idle room off each lease, and renews the leases in use (once a second; public for tests). */
  async tend(): Promise<void> {
    const calls: Promise<void>[] = [];
    const now = this.steady();
    const storedBefore = this.options.storedBefore();
    if (this.uncovered.size > 0) calls.push(this.cover());
    for (const [id, state] of this.scopes) {
      // A grow in flight on a lease with nothing leased may be making its row (a shrink would find none and
      // lapse it); any other grow leaves the row there. Near a budget's end, refused requests keep a grow in
      // flight nearly all the time: skipping the scope then kept costs already in `spent` counted in the lease
      // too, for seconds, and every instance refused requests the budget had room for.
      // A lease still lacking what was taken over (its add failed) is covered first (above), then tended.
      if (state.tending || (state.growing && state.leased === 0) || this.uncovered.has(id)) {
        if (state.tending) state.tendLater = true;
        continue;
      }
      if (state.leased === 0 && state.inflight === 0 && state.settledSum === 0) {
        this.scopes.delete(id);
        continue;
      }
      let stored = 0;
      let keep = 0;
      while (keep < state.settled.length && (state.settled[keep] as { at: number }).at < storedBefore)
        stored += (state.settled[keep++] as { nano: number }).nano;
      const idle = now - state.lastUse >= IDLE_RETURN_MS;
      const unused = idle ? state.leased - state.inflight - state.settledSum : 0;
      const renew = state.validUntil - now < LEASE_TTL_MS / 2;
      if (stored === 0 && unused <= 0 && !renew) continue;
      // Taken off here first, so that nothing is admitted against room on its way back; if the call fails,
      // the database keeps more than this instance counts on, which only holds others back.
      const back = stored + Math.max(0, unused);
      state.settled.splice(0, keep);
      state.settledSum -= stored;
      state.leased -= back;
      const leaseId = state.leaseId;
      state.tending = true;
      const call = this.leases
        .shrink(id, leaseId, back, LEASE_TTL_MS)
        .then((kept) => {
          if (state.leaseId !== leaseId) return;
          // Run out in the database (renewals failed for too long): nothing of it may be counted on.
          if (kept) state.validUntil = now + LEASE_TTL_MS - LEASE_MARGIN_MS;
          else this.lapse(state);
        })
        .catch(() => {
          // Not renewed: if renewals keep failing, the lease lapses (above) and is not counted on.
        })
        .finally(() => {
          state.tending = false;
          this.whenIdle(id, state);
        });
      calls.push(call);
    }
    if (this.scopes.size === 0) this.stop();
    await Promise.all(calls);
  }
}
