import { setTimeout as sleep } from 'node:timers/promises';
import type { BudgetLedger, BudgetScope, Reservation, ReserveResult } from './budget-types.js';
import { BudgetsUnavailableError, lastCostsStoredAfterMs, RECONCILING, RESERVATION_TTL_MS, renewalDue, renewalTimer, toNano } from './budget-types.js';
import { CircuitBreaker } from './circuit-breaker.js';
import { MemoryLedger } from './memory-ledger.js';

/** What the shared ledger (Redis) offers to be brought up to date after it was away. */
export interface SharedLedger extends BudgetLedger {
  /** A reserve that answers {@link RECONCILING}, holding nothing, while the ledger is marked (below). */
  reserveShared(tag: string, scopes: BudgetScope[], eur: number, requestId: string): Promise<ReserveResult | typeof RECONCILING>;
  /** Marks the ledger as owed costs by this instance, so that no instance admits against its totals meanwhile; the mark lapses unless made again. */
  markReconciling(): Promise<void>;
  unmarkReconciling(): Promise<void>;
  /** Whether any instance's reconciliation mark is there. */
  isReconciling(): Promise<boolean>;
  /** A settle that tells whether the shared ledger still had the hold (else it added nothing: a restart took the hold). */
  settleHeld(r: Reservation, actualEur: number): Promise<boolean>;
  /** A settle sent again, first sent `sinceMs` ago: whether the hold was found, and the scopes left to raise to the store's. */
  settleLate(r: Reservation, actualEur: number, sinceMs: number): Promise<{ held: boolean; toRaise: string[] }>;
  reservationOf(tag: string, scopes: BudgetScope[], eur: number, requestId: string): Reservation;
  /** Adds costs settled elsewhere, the first `sinceMs` ago; returns the scopes left alone, whose totals are to come from the store (not loaded, or taken from it since). */
  addSpent(tag: string, scopeIds: string[], nano: number, sinceMs: number): Promise<string[]>;
  /** Changes when the shared ledger lost what it held (Redis restarted). */
  epoch(): Promise<string>;
  /** Raises a scope's total to the store's, if it holds less; never lowers or drops it. */
  raiseSpent(tag: string, scopeId: string, storeEur: number): Promise<void>;
  /** The reservation here of a running request another ledger admitted, once {@link adoptHolds} holds it. */
  adoptionOf(r: Reservation): Reservation;
  /** Holds those running requests (their {@link adoptionOf}) whatever the budgets have left; whether each is held. */
  adoptHolds(rs: Reservation[]): Promise<boolean[]>;
  /** Holds again, in one scope, the holds of these running requests that it no longer has. */
  rehold(tag: string, scopeId: string, rs: Reservation[]): Promise<void>;
}

/** What the database's ledger (leases) offers to take over the holds the shared ledger had for this instance's running requests. */
export interface TakeoverLedger extends BudgetLedger {
  /** Counts a running request's hold (never refused); the reservation it returns is settled there as any other. */
  adoptRunning(tag: string, scopeIds: string[], nano: number, requestId: string): Reservation;
  /** Counts a cost settled at `at` that the store may not have yet. */
  adoptSettled(scopeIds: string[], nano: number, at: number): void;
  /** A time before which every usage record made is stored (Date.now()'s clock). */
  storedBefore(): number;
  /** Puts what was taken over in the database. */
  cover(): Promise<void>;
  /** A scope's spend and the room its leases hold, as the database and this instance know them. */
  peekScope(scope: BudgetScope): Promise<{ spent: number; reserved: number }>;
}

/** Costs settled outside the shared ledger for one set of scopes, not yet added to it; `since`: when the first was (Date.now()). */
interface Owed {
  tag: string;
  scopeIds: string[];
  nano: number;
  since: number;
}

/** A cost settled while its settle had not reached the shared ledger: when (its usage record was made then) and how much. */
interface SettledCost {
  eur: number;
  at: number;
}

const CATCH_UP_EVERY_MS = 1_000;
/** How long a reservation waits for the shared ledger to be reconciled, asking again this often, before it takes the leases. */
const RECONCILING_WAIT_MS = 2_000;
const RECONCILING_POLL_MS = 20;
/** After a restart of Redis, when the totals this instance owed to are raised to the store's again. */
const HEAL_AFTER_MS = [2_000, 10_000];
/** At most this many holds and costs wait to be brought to the shared ledger; past it the oldest go (holds expire by themselves). */
const MAX_WAITING = 100_000;

/**
 * The shared ledger (Redis) while it answers. While it does not, leases in
 * the database (`database`, with PostgreSQL), which every instance shares
 * too, so a budget still holds across instances. When that fails as well,
 * a request with a budget is refused ({@link BudgetsUnavailableError}):
 * each instance's own ledger would admit, against the last total it read,
 * the whole remainder, and so would every other instance's. Only without
 * a shared database (the embedded store, one instance) is this instance's
 * own ledger the last tier.
 *
 * What happened meanwhile is brought to the shared ledger once it answers
 * again, so that it does not admit against a total that misses it: the
 * costs settled in the other ledgers are added to its totals, settles it
 * missed are sent again (a settle removes its hold only once, so a repeat
 * adds nothing twice), and holds whose reserve call failed (it may have
 * run all the same) are released. If Redis restarted meanwhile (its run
 * id changed, or this instance never saw it), its totals are not the ones
 * those costs are missing from: another instance may have loaded them
 * from the store, costs included, already. Once this instance's own usage
 * records are written there, each total is raised to the store's instead
 * (a total the restart lost is loaded only once every instance has had
 * the time to write its records: RedisLedger's `usageFlushMs`).
 *
 * The holds Redis had for this instance's requests still running go with
 * it. So that what the leases admit after does not take their room, the
 * reservations made in Redis and not yet settled there are taken into the
 * leases before they admit anything (and as soon as Redis's connection
 * drops, {@link sharedLost}): a running request's worst case, the cost
 * of one whose settle has not reached Redis, or a cost Redis took whose
 * usage record is not yet stored. Their settles take them off
 * the leases as any lease reservation's, and still go to Redis (now or in
 * the catch-up), which adds their costs when it finds their holds: they
 * are not owed to it as the leases' own costs are.
 */
export class FallbackLedger implements BudgetLedger {
  private readonly local = new MemoryLedger();
  private readonly breaker = new CircuitBreaker(1000);
  private readonly databaseBreaker = new CircuitBreaker(1000);
  /**
   * With leases: the reservations made in the shared ledger whose settle has not reached it, in the order they were
   * made; null while the request runs, else its cost. Taken into the leases when they take over. Keyed by the
   * reservation's id, not the reservation: an object as a Map key gets an identity hash, which cost a request about
   * 5 % more CPU with PostgreSQL + Redis (bench/ab.mjs, six rounds).
   */
  private readonly openInShared = new Map<string, { r: Reservation; settled: SettledCost | null; at: number; renewedAt: number }>();
  /**
   * With leases: costs the shared ledger took whose usage records may not be stored yet, oldest first. Neither the
   * store's `spent` nor any lease has them, so the leases take them too when they take over: else an instance growing
   * its lease just after Redis died admitted the room of every instance's last flush interval of costs a second time.
   */
  private settledInShared: { scopes: string[]; cost: SettledCost }[] = [];
  /** Why the shared ledger last failed, and the database's leases: what a refusal for both says ({@link BudgetsUnavailableError}). */
  private sharedFailure: unknown = null;
  private databaseFailure: unknown = null;
  /** Whether the shared ledger answered last (see {@link noteSharedLost}). */
  private onShared = true;
  /**
   * When the leases may first admit after the shared ledger was lost: by then every instance has stored the costs
   * Redis took from it, or carried them into its lease ({@link settledInShared}). A lease grown sooner was measured
   * against a `spent` and leases that could both lack another instance's last costs: that instance's takeover
   * reaches the database a few milliseconds after the loss, and under load a grow came first.
   */
  private leasesFrom = 0;
  /** Reservations of the shared ledger taken into the leases, with the lease reservation that holds them there. */
  private readonly inLeases = new WeakMap<Reservation, Reservation>();
  /** The last takeover's database writes, which a reservation from the leases waits for. */
  private takingOver: Promise<void> | null = null;
  /** Reservations not made in the shared ledger, by the ledger that holds them. */
  private readonly heldBy = new WeakMap<Reservation, BudgetLedger>();
  /** The leases' reservations of requests still running, not held in the shared ledger: held there at its catch-up. */
  private readonly leaseRunning = new Set<Reservation>();
  /** The leases' reservations held in the shared ledger too (see {@link holdRunningInShared}): that hold, once it lands. */
  private readonly heldInShared = new WeakMap<Reservation, { r: Reservation; held: Promise<boolean> }>();
  /** Costs settled outside the shared ledger, by tag and scopes, not yet added to it; `since`: when the first was settled. */
  private readonly owed = new Map<string, Owed>();
  /** Settles that did not reach the shared ledger; `at`: when first sent (Date.now()), when its usage record was made. */
  private missedSettles: { r: Reservation; eur: number; at: number }[] = [];
  private strayHolds: Reservation[] = [];
  /** Scopes of costs whose settle found no hold in the shared ledger (it restarted meanwhile): raised to the store's. */
  private readonly unheld = new Map<string, { tag: string; scopeIds: string[] }>();
  private raiseRun: Promise<void> | null = null;
  private catchUpTimer: NodeJS.Timeout | null = null;
  private catchUpRun: Promise<void> | null = null;
  /** The scopes seen in reservations, by id: their totals in the store, for a catch-up after Redis restarted. */
  private readonly scopesById = new Map<string, BudgetScope>();
  /** The shared ledger's run id as last seen answering (null: not yet), read once at the first reservation and at each catch-up. */
  private sharedEpoch: string | null = null;
  private epochRead: Promise<void> | null = null;
  /** This instance's reconciliation mark may be in the shared ledger: the next catch-up that leaves nothing owed takes it off. */
  private marked = false;
  /** Renews the holds of this instance's running requests in Redis (see {@link renewOld}). */
  private readonly renewal: NodeJS.Timeout;
  /** The watch for the end of another instance's reconciliation that reservations wait on (see {@link reconciled}). */
  private reconciledWatch: Promise<boolean> | null = null;

  constructor(
    private readonly shared: SharedLedger,
    private readonly database: TakeoverLedger | null = null,
    /** Writes this instance's pending usage records to the store, so that a total reloaded from it has their costs. */
    private readonly flushUsage: () => Promise<void> = async () => {},
    /** How often every instance writes its usage records (see {@link leasesFrom}). */
    private readonly usageFlushMs = 500,
  ) {
    // Known from the start: an instance whose first reservation found Redis away took it, at its catch-up, for a
    // restarted one, and raised totals to the store's, which lacked costs other instances had added there meanwhile.
    this.readEpoch();
    this.renewal = renewalTimer(RESERVATION_TTL_MS, () => this.renewOld());
  }

  async reserve(tag: string, scopes: BudgetScope[], eur: number, requestId: string): Promise<ReserveResult> {
    for (const scope of scopes) if (this.scopesById.get(scope.id) !== scope) this.scopesById.set(scope.id, scope);
    if (this.breaker.allow()) {
      try {
        // Back after an outage: what it missed first, so that it does not admit against totals that lack it.
        if (this.behind) await this.catchUp();
        let res = await this.shared.reserveShared(tag, scopes, eur, requestId);
        // Another instance is still adding what it spent on the leases while Redis was away, which these totals lack
        // (usually for a few milliseconds): waited for here. Admitted on the leases instead, the request would be owed
        // to Redis in turn and mark it again at the next catch-up, and a busy fleet never left reconciling.
        if (res === RECONCILING && (await this.reconciled())) res = await this.shared.reserveShared(tag, scopes, eur, requestId);
        this.breaker.success();
        if (this.sharedEpoch === null) this.readEpoch();
        if (res !== RECONCILING) {
          this.onShared = true;
          if (res.ok && this.database) this.trackOpen(res.reservation);
          return res;
        }
        // Still marked (an instance that owed costs died, its mark not yet lapsed): the leases, which know every
        // instance's spending, admit meanwhile (below), as during the outage.
      } catch (err) {
        this.sharedFailure = err;
        this.noteSharedLost();
        if (this.database) this.markBeforeLeases();
        this.breaker.failure();
        this.strayHolds.push(this.shared.reservationOf(tag, scopes, eur, requestId));
        this.scheduleCatchUp();
      }
    }
    if (this.database) {
      // Not tried for a second after a lease call failed: that failure is the one to tell.
      if (!this.databaseBreaker.allow()) throw new BudgetsUnavailableError(this.sharedFailure, this.databaseFailure);
      try {
        const wait = this.leasesFrom - Date.now();
        if (wait > 0) await sleep(wait);
        // Requests Redis admitted, still running, hold room in no lease yet: they go in first.
        if (this.toTakeOver() || this.takingOver) await this.takeOver(this.database);
        const res = await this.database.reserve(tag, scopes, eur, requestId);
        this.databaseBreaker.success();
        if (res.ok) {
          this.heldBy.set(res.reservation, this.database);
          this.leaseRunning.add(res.reservation);
        }
        return res;
      } catch (err) {
        this.databaseBreaker.failure();
        this.databaseFailure = err;
        throw new BudgetsUnavailableError(this.sharedFailure, err);
      }
    }
    const res = await this.local.reserve(tag, scopes, eur, requestId);
    if (res.ok) this.heldBy.set(res.reservation, this.local);
    return res;
  }

  async settle(r: Reservation, actualEur: number): Promise<void> {
    const inShared = this.heldInShared.get(r);
    if (inShared) {
      this.heldInShared.delete(r);
      // Held in the shared ledger too: its settle there adds the cost (nothing owed), and the lease lets go as usual.
      if (await inShared.held) {
        this.database?.settle(r, actualEur).catch(() => {});
        try {
          await this.settleInShared(inShared.r, actualEur);
        } catch {
          this.missedSettles.push({ r: inShared.r, eur: actualEur, at: Date.now() });
          this.scheduleCatchUp();
        }
        return;
      }
      // Not held there after all: the leases' reservation it was (below).
      if (this.database) this.heldBy.set(r, this.database);
    }
    const elsewhere = this.heldBy.get(r);
    if (elsewhere) {
      this.leaseRunning.delete(r);
      const nano = toNano(actualEur);
      if (nano > 0) {
        this.owe(r.tag, r.scopes, nano);
        this.scheduleCatchUp();
      }
      try {
        await elsewhere.settle(r, actualEur);
      } catch {
        // Its hold lapses by itself; the spend reaches the store through the usage record.
      }
      return;
    }
    const leased = this.inLeases.get(r);
    if (leased) {
      this.inLeases.delete(r);
      // Off the lease as any of its reservations (its cost stays there until stored); Redis still gets the settle.
      this.database?.settle(leased, actualEur).catch(() => {});
    } else {
      const open = this.openInShared.get(r.id);
      if (open?.r === r) open.settled = { eur: actualEur, at: Date.now() };
    }
    try {
      await this.settleInShared(r, actualEur);
    } catch {
      this.missedSettles.push({ r, eur: actualEur, at: Date.now() });
      this.scheduleCatchUp();
    }
  }

  /** A settle that reached the shared ledger: no longer open there; a cost whose hold it no longer had is raised to the store's. */
  private async settleInShared(r: Reservation, actualEur: number): Promise<void> {
    const held = await this.shared.settleHeld(r, actualEur);
    const open = this.openInShared.get(r.id);
    if (open?.r === r) {
      this.openInShared.delete(r.id);
      if (held && open.settled && open.settled.eur > 0) this.rememberSettled(r.scopes, open.settled);
    }
    if (!held) this.costWithoutHold(r, actualEur);
  }

  /**
   * A settle that did not reach the shared ledger, sent again. Its cost is not added to a total that took the store's
   * value since the settle was first sent (raised by any instance, or loaded): once its usage record was written it
   * was in that value, and adding it counted it twice. Such a total is raised to the store's instead, once this
   * instance's records are written. A hold no longer there is raised for only if Redis restarted (`raiseUnheld`):
   * else it is gone because the first settle ran after all (a stalled Redis runs what it was sent once it wakes),
   * and a raise would put in costs other instances still owe it and add on their catch-up, counting them twice.
   */
  private async settleLate(m: { r: Reservation; eur: number; at: number }, raiseUnheld: boolean): Promise<void> {
    const { held, toRaise } = await this.shared.settleLate(m.r, m.eur, Date.now() - m.at);
    if (this.openInShared.get(m.r.id)?.r === m.r) this.openInShared.delete(m.r.id);
    if (!held) {
      if (raiseUnheld) this.costWithoutHold(m.r, m.eur);
    } else if (toRaise.length > 0) this.raiseWhenStored(m.r.tag, toRaise);
  }

  /**
   * The shared ledger's connection dropped: the holds it had for this instance's running requests go into the
   * leases now, before another instance's lease can take their room (and before this one's admits anything).
   */
  sharedLost(): void {
    this.noteSharedLost();
    if (this.database && this.toTakeOver()) this.takeOver(this.database).catch(() => {});
  }

  /**
   * A failure of the shared ledger, before the leases admit anything: what they admit will be owed to it,
   * so it is marked reconciling now, while its connection may still take the command. A stalled Redis (or one cut
   * off by the network) runs what it was sent once it answers again, before anything sent after: no other instance
   * then admits against its totals before this one has added what the leases spent. A Redis that is gone fails the
   * mark at once; it comes back empty, and its totals are loaded from the store with the leases' room held.
   */
  private markBeforeLeases(): void {
    this.marked = true;
    this.shared.markReconciling().catch(() => {});
  }

  /**
   * Whether the shared ledger's reconciliation mark went within {@link RECONCILING_WAIT_MS}: one watch for all the
   * reservations that found it, asking Redis every {@link RECONCILING_POLL_MS}.
   */
  private reconciled(): Promise<boolean> {
    this.reconciledWatch ??= (async () => {
      try {
        for (let waited = 0; waited < RECONCILING_WAIT_MS; waited += RECONCILING_POLL_MS) {
          await sleep(RECONCILING_POLL_MS);
          if (!(await this.shared.isReconciling())) return true;
        }
        return false;
      } catch {
        return false;
      } finally {
        this.reconciledWatch = null;
      }
    })();
    return this.reconciledWatch;
  }

  /**
   * The shared ledger's connection is ready again: what it missed is brought to it now rather than at the next tick
   * (up to a second later), during which every other instance admitted against totals that lacked this one's costs.
   */
  sharedBack(): void {
    if (this.behind) this.catchUp().catch(() => {});
  }

  /**
   * An instance loaded the scope's total into the shared ledger: if it was emptied while this instance's requests ran
   * (FLUSHALL, an eviction, with no dropped connection to tell), their holds went with it, and what it admitted next
   * would spend their room again. Those not yet settled are held again (a settle sent before runs after them).
   */
  async totalLoaded(tag: string, scopeId: string): Promise<void> {
    if (this.openInShared.size === 0) return;
    const running: Reservation[] = [];
    for (const { r, settled } of this.openInShared.values()) if (settled === null && r.tag === tag && r.scopes.includes(scopeId)) running.push(r);
    await this.shared.rehold(tag, scopeId, running);
  }

  /** Whether the shared ledger holds anything of this instance's that the leases must take over (see {@link takeOver}). */
  private toTakeOver(): boolean {
    return this.openInShared.size > 0 || this.settledInShared.length > 0;
  }

  /** The first failure after the shared ledger answered: the leases wait before they admit ({@link leasesFrom}). */
  private noteSharedLost(): void {
    if (!this.onShared) return;
    this.onShared = false;
    this.leasesFrom = Date.now() + lastCostsStoredAfterMs(this.usageFlushMs);
  }

  /** A cost the shared ledger took, kept until its usage record is stored (see {@link settledInShared}). */
  private rememberSettled(scopes: string[], cost: SettledCost): void {
    const storedBefore = (this.database as TakeoverLedger).storedBefore();
    let stored = 0;
    while (stored < this.settledInShared.length && (this.settledInShared[stored] as { cost: SettledCost }).cost.at < storedBefore) stored++;
    if (stored > 0) this.settledInShared.splice(0, stored);
    if (this.settledInShared.length < MAX_WAITING) this.settledInShared.push({ scopes, cost });
  }

  private trackOpen(r: Reservation): void {
    const now = Date.now();
    this.openInShared.set(r.id, { r, settled: null, at: now, renewedAt: now });
    if (this.openInShared.size > MAX_WAITING) this.openInShared.delete(this.openInShared.keys().next().value as string);
  }

  /** Takes the reservations open in the shared ledger into the leases (counted at once), then waits for the database to have them. */
  private takeOver(database: TakeoverLedger): Promise<void> {
    if (this.toTakeOver()) {
      for (const { scopes, cost } of this.settledInShared) {
        const limited = scopes.filter((id) => (this.scopesById.get(id)?.limit ?? null) !== null);
        if (limited.length > 0) database.adoptSettled(limited, toNano(cost.eur), cost.at);
      }
      this.settledInShared = [];
      for (const { r, settled } of this.openInShared.values()) {
        const limited = r.scopes.filter((id) => (this.scopesById.get(id)?.limit ?? null) !== null);
        if (limited.length === 0) continue;
        if (settled) database.adoptSettled(limited, toNano(settled.eur), settled.at);
        else this.inLeases.set(r, database.adoptRunning(r.tag, limited, r.nano, r.id));
      }
      this.openInShared.clear();
      const run = (this.takingOver ?? Promise.resolve()).catch(() => {}).then(() => database.cover());
      this.takingOver = run;
      run
        .finally(() => {
          if (this.takingOver === run) this.takingOver = null;
        })
        .catch(() => {});
    }
    return this.takingOver ?? Promise.resolve();
  }

  async release(r: Reservation): Promise<void> {
    return this.settle(r, 0);
  }

  /** Redis's view; while it is away, the leases': a refusal for room they hold is told to retry, not that the budget is spent. */
  async peek(tag: string, scopeId: string): Promise<{ spent: number; reserved: number } | null> {
    try {
      return await this.shared.peek(tag, scopeId);
    } catch (err) {
      const scope = this.scopesById.get(scopeId);
      if (!this.database || !scope) throw err;
      return this.database.peekScope(scope);
    }
  }

  /** In Redis; a hold the leases took has no life to renew (it goes with its instance's lease). */
  async renew(r: Reservation): Promise<void> {
    await this.shared.renew?.(r);
  }

  stop(): void {
    clearInterval(this.renewal);
    this.local.stop();
  }

  /** The holds Redis has of this instance's running requests, a third of their life old: renewed. */
  private renewOld(): void {
    const now = Date.now();
    for (const open of this.openInShared.values()) {
      if (open.settled !== null || !renewalDue(open.at, open.renewedAt, RESERVATION_TTL_MS, now)) continue;
      open.renewedAt = now;
      this.renew(open.r).catch(() => {});
    }
  }

  /** A total kept in Redis from before the scope had no budget is raised to the store's, now and again later. */
  async budgetSet(tag: string, scope: BudgetScope): Promise<void> {
    this.scopesById.set(scope.id, scope);
    this.raiseWhenStored(tag, [scope.id]);
    await this.raiseRun;
  }

  roomBackInMs(tag: string, scopeId: string, nano: number): Promise<number | null> {
    return this.shared.roomBackInMs?.(tag, scopeId, nano) ?? Promise.resolve(null);
  }

  private owe(tag: string, scopeIds: string[], nano: number, since = Date.now()): void {
    const id = `${tag} ${scopeIds.join(' ')}`;
    const entry = this.owed.get(id);
    if (entry) {
      entry.nano += nano;
      entry.since = Math.min(entry.since, since);
    } else this.owed.set(id, { tag, scopeIds, nano, since });
  }

  /**
   * A settle found no hold: Redis restarted (or the hold expired) while the request ran, so its cost was added to
   * no total there, and a total loaded from the store before its usage record was written lacks it for good. Once
   * this instance's records are written, the scope's total is raised to the store's (now and again later, as after
   * a catch-up): never counted twice, as the higher of the two stays.
   */
  private costWithoutHold(r: Reservation, actualEur: number): void {
    if (toNano(actualEur) > 0) this.raiseWhenStored(r.tag, r.scopes);
  }

  /** Raises the scopes' totals to the store's once this instance's usage records are written, and again later. */
  private raiseWhenStored(tag: string, scopeIds: string[]): void {
    this.unheld.set(`${tag} ${scopeIds.join(' ')}`, { tag, scopeIds });
    this.raiseRun ??= this.raiseUnheld().finally(() => {
      this.raiseRun = null;
    });
  }

  private async raiseUnheld(): Promise<void> {
    while (this.unheld.size > 0) {
      const entries = [...this.unheld.values()];
      this.unheld.clear();
      await this.flushUsage().catch(() => {});
      for (const e of entries) await this.raiseToStore(e.tag, e.scopeIds).catch(() => {});
      this.raiseAgainLater(entries);
    }
  }

  /** Something waits to be brought to the shared ledger: it is tried every second until it is. */
  private scheduleCatchUp(): void {
    if (this.missedSettles.length > MAX_WAITING) this.missedSettles.splice(0, this.missedSettles.length - MAX_WAITING);
    if (this.strayHolds.length > MAX_WAITING) this.strayHolds.splice(0, this.strayHolds.length - MAX_WAITING);
    if (this.catchUpTimer) return;
    this.catchUpTimer = setInterval(() => this.catchUp().catch(() => {}), CATCH_UP_EVERY_MS);
    this.catchUpTimer.unref();
  }

  private get behind(): boolean {
    return this.owed.size > 0 || this.missedSettles.length > 0 || this.strayHolds.length > 0 || this.marked;
  }

  /** Brings the shared ledger up to date (one run at a time, which every caller waits for); rejects if it does not answer. */
  private catchUp(): Promise<void> {
    this.catchUpRun ??= this.runCatchUp().finally(() => {
      this.catchUpRun = null;
      if (!this.behind && this.catchUpTimer) {
        clearInterval(this.catchUpTimer);
        this.catchUpTimer = null;
      }
    });
    return this.catchUpRun;
  }

  /**
   * After a restart of Redis, its totals were loaded from the store by whichever instance came first, with or
   * without the costs this one owes (stored before or after that load). Each is raised to the store's total,
   * read now that those costs are in it: the higher of two totals that each may miss some costs, never both
   * counted (adding them counted twice what the load had), and settles in flight still land.
   */
  private async raiseToStore(tag: string, scopeIds: string[]): Promise<void> {
    for (const id of scopeIds) {
      const scope = this.scopesById.get(id);
      if (scope) await this.shared.raiseSpent(tag, id, await scope.loadSpent());
    }
  }

  /**
   * Once more a little later, when every instance has written the usage records it held at the restart:
   * a total that missed costs then (settled while another instance raised it, or not written yet when it
   * was loaded) comes up to the store's, instead of staying short for as long as Redis keeps it.
   */
  private raiseAgainLater(entries: { tag: string; scopeIds: string[] }[]): void {
    for (const delayMs of HEAL_AFTER_MS) {
      const timer = setTimeout(() => {
        for (const e of entries) this.raiseToStore(e.tag, e.scopeIds).catch(() => {});
      }, delayMs);
      timer.unref();
    }
  }

  /**
   * The requests admitted on the leases and still running hold room there only: back on the shared ledger, this
   * instance and every other would admit against totals without them, and their costs, added when they settle,
   * would land on top (the budget overspent by as much). Each is held in the shared ledger too, whatever its totals
   * have left (it runs either way), and its settle goes there (its cost added, not owed). One whose totals the shared
   * ledger has not loaded in this run stays the leases' alone: a total loaded later holds the leases' room. Its settle
   * meanwhile waits to know which it is. Not after a restart: totals loaded since hold the leases' room already.
   */
  private async holdRunningInShared(): Promise<void> {
    const database = this.database;
    if (!database || this.leaseRunning.size === 0) return;
    const running = [...this.leaseRunning];
    this.leaseRunning.clear();
    const adoptions = running.map((l) => this.shared.adoptionOf(l));
    const sent = this.shared.adoptHolds(adoptions).catch(() => running.map(() => false));
    running.forEach((l, i) => {
      this.heldBy.delete(l);
      this.heldInShared.set(l, { r: adoptions[i] as Reservation, held: sent.then((held) => held[i] === true) });
    });
    const held = await sent;
    running.forEach((l, i) => {
      // Settled meanwhile: its settle saw which it was. Else, not held: the leases' still, tried again next run.
      if (held[i] || !this.heldInShared.delete(l)) return;
      this.heldBy.set(l, database);
      this.leaseRunning.add(l);
    });
  }

  /** Notes the shared ledger's run id, off the request path; a failure leaves it unknown (a catch-up then raises totals to the store's). */
  private readEpoch(): void {
    this.epochRead ??= this.shared
      .epoch()
      .then((epoch) => {
        this.sharedEpoch ??= epoch;
      })
      .catch(() => {})
      .finally(() => {
        this.epochRead = null;
      });
  }

  /**
   * Costs first, then the missed settles and the stray holds; what fails stays for the next run. While costs are
   * owed the ledger is marked reconciling first, so that until they are in no instance admits against its totals
   * (they go to the leases, which know them), and the mark goes once nothing is owed.
   */
  private async runCatchUp(): Promise<void> {
    if (this.owed.size > 0) {
      this.marked = true;
      await this.shared.markReconciling();
    }
    const epoch = await this.shared.epoch();
    const restarted = this.sharedEpoch !== epoch;
    // The costs owed are reloaded from the store rather than added: they must be in it first.
    if (restarted && this.owed.size > 0) await this.flushUsage().catch(() => {});
    const owed = [...this.owed.values()];
    this.owed.clear();
    const raised: { tag: string; scopeIds: string[] }[] = [];
    for (const [i, entry] of owed.entries()) {
      let unpaid = entry;
      try {
        if (restarted) await this.raiseToStore(entry.tag, entry.scopeIds);
        else {
          // A total that took the store's value since these costs were settled (loaded, or raised by an instance
          // after a restart of Redis) may have them already, once their usage records were written: adding them
          // counted them twice. A total Redis does not hold (emptied by FLUSHALL, or never loaded) is loaded from the
          // store, maybe by another instance before these records are written: nothing added, the costs were lost.
          // Either way the records are written first (before the mark goes: no load meanwhile), then the total is
          // raised to the store's (the higher stays), now and again later.
          const toRaise = await this.shared.addSpent(entry.tag, entry.scopeIds, entry.nano, Date.now() - entry.since);
          if (toRaise.length > 0) {
            unpaid = { ...entry, scopeIds: toRaise };
            await this.flushUsage().catch(() => {});
            await this.raiseToStore(entry.tag, toRaise);
            raised.push({ tag: entry.tag, scopeIds: toRaise });
          }
        }
      } catch (err) {
        for (const rest of [unpaid, ...owed.slice(i + 1)]) this.owe(rest.tag, rest.scopeIds, rest.nano, rest.since);
        throw err;
      }
    }
    // Only now: a run cut short compares with the run id from before the outage again.
    this.sharedEpoch = epoch;
    if (restarted) this.raiseAgainLater(owed);
    else if (raised.length > 0) this.raiseAgainLater(raised);
    // Before the mark goes: the requests still running on the leases are held in the totals too.
    if (!restarted) await this.holdRunningInShared();
    // Costs settled during this run are owed still: the mark stays, made again at the next run.
    if (this.marked && this.owed.size === 0) {
      await this.shared.unmarkReconciling();
      this.marked = false;
    }
    const settles = this.missedSettles;
    const strays = this.strayHolds;
    this.missedSettles = [];
    this.strayHolds = [];
    const retry = <T>(item: T, sent: Promise<void>) => sent.then(noneLeft, () => item);
    const failed = await Promise.all(settles.map((m) => retry(m, this.settleLate(m, restarted))));
    const stuck = await Promise.all(strays.map((r) => retry(r, this.shared.release(r))));
    for (const m of failed) if (m) this.missedSettles.push(m);
    for (const r of stuck) if (r) this.strayHolds.push(r);
  }
}

const noneLeft = (): null => null;
