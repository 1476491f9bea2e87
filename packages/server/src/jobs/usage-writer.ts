import type { Store, UsageRecord } from '../store/types.js';

export interface UsageWriterOptions {
  flushIntervalMs: number;
  /** Rows per insert statement. */
  maxBatch: number;
  onError: (err: unknown) => void;
}

/**
 * Buffers usage records and writes them in batches (one insert per chunk)
 * on a timer, never on a request's path. A failed write keeps the records
 * and retries, so a database outage loses nothing; spend is added only
 * after its records are stored, and retried on its own if that part fails.
 * A hard crash loses at most the last flush interval's records.
 */
export class UsageWriter {
  private buffer: UsageRecord[] = [];
  private readonly pendingKeySpend = new Map<string, number>();
  private readonly pendingWorkspaceSpend = new Map<string, number>();
  private timer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> | null = null;

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

  /**
   * Writes everything recorded before the call (unless the store fails).
   * A write already running may have taken its rows before the newest
   * records came: this waits for it, then writes what is left.
   */
  async flush(): Promise<void> {
    while (this.flushing) await this.flushing;
    if (this.buffer.length === 0 && this.pendingKeySpend.size === 0 && this.pendingWorkspaceSpend.size === 0) return;
    this.flushing = this.doFlush().finally(() => {
      this.flushing = null;
    });
    await this.flushing;
  }

  /** Stops the timer and writes everything, retrying a few times. */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    for (let i = 0; i < 5 && (this.buffer.length > 0 || this.pendingKeySpend.size > 0); i++) {
      await this.flush();
      if (this.buffer.length > 0) await new Promise((r) => setTimeout(r, 200));
    }
  }

  private async doFlush(): Promise<void> {
    // Only the records there when the flush began: those recorded during its writes wait for the next
    // tick. Chasing them kept the database busy with a stream of small inserts (about 14 rows each at
    // one connection), each paying a statement's fixed cost, instead of one batch per interval.
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
      for (const r of batch) {
        if (r.cost <= 0) continue;
        add(this.pendingKeySpend, r.keyId, r.cost);
        if (r.workspaceId) add(this.pendingWorkspaceSpend, r.workspaceId, r.cost);
      }
    }
    await this.flushSpend(this.pendingKeySpend, (id, amount) => this.store.keys.addSpent(id, amount));
    await this.flushSpend(this.pendingWorkspaceSpend, (id, amount) => this.store.workspaces.addSpent(id, amount));
  }

  private async flushSpend(pending: Map<string, number>, write: (id: string, amount: number) => Promise<void>): Promise<void> {
    for (const [id, amount] of [...pending]) {
      try {
        await write(id, amount);
        const left = (pending.get(id) ?? 0) - amount;
        if (Math.abs(left) < 1e-12) pending.delete(id);
        else pending.set(id, left);
      } catch (err) {
        this.options.onError(err);
        return;
      }
    }
  }
}

function add(map: Map<string, number>, id: string, amount: number): void {
  map.set(id, (map.get(id) ?? 0) + amount);
}
