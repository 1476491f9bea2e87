import type { Store } from './types.js';

/** How often the database's clock is read again (a step of it, or a drift between the two, lasts at most this long). */
const READ_EVERY_MS = 60_000;
/** A reading whose round trip took longer than this tells the time too loosely: the last one is kept. */
const MAX_ROUND_TRIP_MS = 1_000;
/** How soon a reading that failed or was too slow is made again. */
const RETRY_MS = 1_000;

/**
 * The time usage records are stamped with: the clock of the database they are stored in, as every instance sharing it
 * reads it, so that the records of instances whose own clocks disagree (NTP drift, a VM resumed from a pause) are in
 * one order and none is stored minutes or hours off. Between readings (and while the database does not answer) it
 * runs on this process's monotonic clock from the last one. The embedded database shares this host's clock: it is
 * read from there.
 */
export class DbClock {
  /** The database's time when this process's monotonic clock read 0. */
  private originMs = performance.timeOrigin;
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;
  private readAlready = false;

  constructor(private readonly read: () => Promise<number>) {}

  /** Milliseconds since the epoch by the database's clock. */
  nowMs(): number {
    return this.originMs + performance.now();
  }

  /**
   * Reads the database's clock (the start waits for this first reading, so that no record is stamped before it), then
   * every minute; a reading that failed or was too slow (the first, made while the pool connects, may be) is made
   * again a second later.
   */
  async start(): Promise<void> {
    this.schedule(await this.readOnce());
  }

  private schedule(read: boolean): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => void this.readOnce().then((again) => this.schedule(again)), read ? READ_EVERY_MS : RETRY_MS);
    this.timer.unref();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }

  /** True when it was read (public for tests). */
  async readOnce(): Promise<boolean> {
    const sent = performance.now();
    let dbMs: number;
    try {
      dbMs = await this.read();
    } catch {
      return false;
    }
    const answered = performance.now();
    if (!Number.isFinite(dbMs)) return false;
    const loose = answered - sent > MAX_ROUND_TRIP_MS;
    // A slow first reading is still nearer than this host's clock, which may be hours off: taken, and made again soon.
    if (loose && this.readAlready) return false;
    this.originMs = dbMs - (sent + answered) / 2;
    this.readAlready = true;
    return !loose;
  }
}

/** The clock of `store`'s database: PostgreSQL's read with a query, the embedded one's this host's. */
export function dbClockOf(store: Store): DbClock {
  return new DbClock(store.clockMs ? store.clockMs.bind(store) : async () => Date.now());
}
