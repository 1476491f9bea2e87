import type { Store, UsageRecord } from '../store/types.js';
import type { UsageSpill } from './usage-spill.js';

/**
 * How often the gateway writes its usage records: what a hard crash can lose (a clean stop and a drain flush everything);
 * a flush's fixed cost is paid every interval, and at 100 ms it was half the database thread's CPU per request
 * (docs/decisions.md).
 */
export const USAGE_FLUSH_MS = 500;

export interface UsageWriterOptions {
  flushIntervalMs: number;
  /** Rows per insert statement. */
  maxBatch: number;
  /** Each failed write or spill (a database outage: every flush, twice a second). */
  onError: (err: unknown) => void;
  /** The first write the database took after one or more it refused: the outage is over. */
  onRecovered?: () => void;
  /** After a flush that stored every record made before it began (the budget leases take their costs off then). */
  onStored?: () => void;
  /** Where a batch the database did not take goes, until it does (memory otherwise). */
  spill?: UsageSpill;
  /** Records put on disk, or written from it. */
  onSpill?: (event: { spilled: number } | { replayed: number }) => void;
}

const STOP_RETRY_MS = 250;
const REPLAY_RETRY_MS = 2_000;
/** How often the spill directory is read for segments another gateway on it left when it ended. */
const ORPHAN_CHECK_MS = 5_000;

export class UnwrittenUsageError extends Error {
  constructor(readonly count: number) {
    super(`${count} usage records could not be written before the shutdown deadline (the database is unreachable); they are lost`);
  }
}

/**
 * Buffers usage records and writes them in batches (one statement per
 * chunk) on a timer, never on a request's path. A failed write keeps the
 * records and retries, so a database outage loses nothing; the statement
 * that stores records also adds their cost to the spend, so a retried
 * batch adds nothing twice and no stored record lacks its spend. With a
 * spill directory, a batch the database refused goes to disk and is
 * written from there once the database answers, a segment per interval,
 * so that memory holds one interval of records whatever the outage's
 * length. A hard crash loses at most the last flush interval's records.
 */
export class UsageWriter {
  private buffer: UsageRecord[] = [];
  private timer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> | null = null;
  private allStoredBefore = 0;
  /** After a replay that failed, the next waits (a segment is read whole each time). */
  private replayNotBefore = 0;
  /** The database refused the last write it was sent. */
  private refusing = false;
  private orphanCheckAt = 0;

  constructor(
    private readonly store: Store,
    private readonly options: UsageWriterOptions,
  ) {}

  start(): void {
    // A tick while a write runs is skipped: during a database outage ticks would otherwise queue up behind it.
    this.timer = setInterval(() => {
      if (!this.flushing) void this.flush();
    }, this.options.flushIntervalMs);
    this.timer.unref();
  }

  record(record: UsageRecord): void {
    this.buffer.push(record);
  }

  get pending(): number {
    return this.buffer.length;
  }

  /** A time (Date.now()) before which every record made is stored: the budget leases take costs off once they are in `spent`. */
  get storedBefore(): number {
    const inMemory = this.buffer.length === 0 && !this.flushing ? Date.now() : this.allStoredBefore;
    const onDisk = this.options.spill?.oldestMadeAfter ?? null;
    return onDisk === null ? inMemory : Math.min(inMemory, onDisk);
  }

  /**
   * Writes everything recorded before the call (unless the store fails).
   * A write already running may have taken its rows before the newest
   * records came: this waits for it, then writes what is left.
   */
  async flush(): Promise<void> {
    while (this.flushing) await this.flushing;
    if (this.buffer.length === 0 && !this.options.spill?.waiting && !this.orphanCheckDue()) return;
    this.flushing = this.doFlush().finally(() => {
      this.flushing = null;
    });
    await this.flushing;
  }

  /**
   * Stops the timer and writes everything, retrying (the database may be
   * on its way back) until `deadline` (Date.now() time). Rejects, saying
   * how many records are left unwritten, if it could not: a stop must not
   * pass for clean while records are lost.
   */
  async stop(deadline = Date.now() + 1_000): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    for (;;) {
      await this.flush();
      if (this.buffer.length === 0) return;
      if (Date.now() + STOP_RETRY_MS > deadline) throw new UnwrittenUsageError(this.buffer.length);
      await new Promise((r) => setTimeout(r, STOP_RETRY_MS));
    }
  }

  private async doFlush(): Promise<void> {
    // Only the records there when the flush began: those recorded during its writes wait for the next
    // tick. Chasing them kept the database busy with a stream of small inserts (about 14 rows each at
    // one connection), each paying a statement's fixed cost, instead of one batch per interval.
    const startedAt = Date.now();
    let left = this.buffer.length;
    let refused = false;
    while (left > 0) {
      const batch = this.buffer.slice(0, Math.min(left, this.options.maxBatch));
      try {
        await this.store.usage.insertMany(batch);
      } catch (err) {
        this.refusing = true;
        this.options.onError(err);
        refused = true;
        break;
      }
      this.tookWrite();
      this.buffer = this.buffer.slice(batch.length);
      left -= batch.length;
    }
    if (refused) left -= await this.spillFirst(left);
    else {
      await this.adoptOrphans();
      await this.replayOldestSpill();
    }
    // Every record made before this flush began was in the buffer then, and all of those are written or on disk
    // (whose oldest record bounds `storedBefore`).
    if (left === 0) {
      this.allStoredBefore = startedAt;
      this.options.onStored?.();
    }
  }

  /** The first `count` buffered records to disk; how many went (none if the disk refused: they stay here). */
  private async spillFirst(count: number): Promise<number> {
    const spill = this.options.spill;
    if (!spill || count === 0) return 0;
    try {
      // Every record made before the last whole flush began is stored or on disk: the buffer's were made since.
      await spill.append(this.buffer.slice(0, count), this.allStoredBefore);
    } catch (err) {
      this.options.onError(err);
      return 0;
    }
    this.buffer = this.buffer.slice(count);
    this.options.onSpill?.({ spilled: count });
    return count;
  }

  private orphanCheckDue(): boolean {
    return this.options.spill !== undefined && Date.now() >= this.orphanCheckAt;
  }

  /** Now and then, while the database takes writes: the segments of a gateway that ended, left on a shared directory. */
  private async adoptOrphans(): Promise<void> {
    if (!this.orphanCheckDue()) return;
    this.orphanCheckAt = Date.now() + ORPHAN_CHECK_MS;
    // A directory that cannot be read now is read again at the next check (a write failure it is not).
    await this.options.spill?.adoptOrphans().catch(() => {});
  }

  /** Writes the oldest segment on disk, if any; it stays there (to be tried again) unless all of it went in. */
  private async replayOldestSpill(): Promise<void> {
    if (!this.options.spill?.waiting || Date.now() < this.replayNotBefore) return;
    const taken = await this.options.spill.takeOldest().catch((err: unknown) => {
      this.options.onError(err);
      return null;
    });
    if (!taken) return;
    try {
      for (let i = 0; i < taken.records.length; i += this.options.maxBatch) {
        await this.store.usage.insertMany(taken.records.slice(i, i + this.options.maxBatch));
      }
      await taken.done();
    } catch (err) {
      this.refusing = true;
      this.options.onError(err);
      this.replayNotBefore = Date.now() + REPLAY_RETRY_MS;
      return;
    }
    this.tookWrite();
    this.options.onSpill?.({ replayed: taken.records.length });
  }

  private tookWrite(): void {
    if (!this.refusing) return;
    this.refusing = false;
    this.options.onRecovered?.();
  }
}
