import type { Store, UsageRecord } from '../store/types.js';

export interface UsageWriterOptions {
  flushIntervalMs: number;
  /** Rows per insert statement. */
  maxBatch: number;
  onError: (err: unknown) => void;
  /** After a flush that stored every record made before it began (the budget leases take their costs off then). */
  onStored?: () => void;
}

const STOP_RETRY_MS = 250;

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
 * batch adds nothing twice and no stored record lacks its spend. A hard
 * crash loses at most the last flush interval's records.
 */
export class UsageWriter {
  private buffer: UsageRecord[] = [];
  private timer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> | null = null;
  private allStoredBefore = 0;

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
    return this.buffer.length === 0 && !this.flushing ? Date.now() : this.allStoredBefore;
  }

  /**
   * Writes everything recorded before the call (unless the store fails).
   * A write already running may have taken its rows before the newest
   * records came: this waits for it, then writes what is left.
   */
  async flush(): Promise<void> {
    while (this.flushing) await this.flushing;
    if (this.buffer.length === 0) return;
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
    while (left > 0) {
      const batch = this.buffer.slice(0, Math.min(left, this.options.maxBatch));
      try {
        await this.store.usage.insertMany(batch);
      } catch (err) {
        this.options.onError(err);
        break;
      }
      this.buffer = this.buffer.slice(batch.length);
      left -= batch.length;
    }
    // Every record made before this flush began was in the buffer then, and all of those are written.
    if (left === 0) {
      this.allStoredBefore = startedAt;
      this.options.onStored?.();
    }
  }
}
