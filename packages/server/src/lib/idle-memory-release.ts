import { collectGarbage } from './collect-garbage.js';

export interface IdleMemoryReleaseOptions {
  /** How often traffic and memory are looked at. */
  checkEveryMs: number;
  /** How long no request may have started or be in flight before memory is handed back. */
  idleForMs: number;
  /** Resident memory grown by at least this since the last hand-back (or the start). */
  minGrowthBytes: number;
  /** Requests started so far (a counter that only grows; what counts as traffic is the caller's choice) and requests in flight. */
  traffic: () => { started: number; inFlight: number };
  rss?: () => number;
  collect?: () => void;
  onRelease?: (fromBytes: number, toBytes: number, ms: number) => void;
}

/**
 * Hands memory back to the system once the gateway has been idle for a
 * moment after it grew. V8 keeps the heap pages a collection frees pooled
 * for reuse, and counts them in the process's resident memory: after a
 * burst (1,000 streams at once) the gateway stayed 30-60 MB above where it
 * started, however long it then sat idle. A memory-reducing collection
 * returns them, at the cost of one pause, taken only when no request is in
 * flight or has started for `idleForMs`, and only after growth, so steady
 * or sparse traffic never pays for it. The JVM's periodic G1 collection
 * does the same for the same reason.
 */
export class IdleMemoryRelease {
  private timer: NodeJS.Timeout | null = null;
  private lastStarted = -1;
  private quietSince = 0;
  private baseline: number;
  private readonly rss: () => number;
  private readonly collect: () => void;

  constructor(private readonly options: IdleMemoryReleaseOptions) {
    this.rss = options.rss ?? (() => process.memoryUsage.rss());
    this.collect = options.collect ?? (() => void collectGarbage('last-resort'));
    this.baseline = this.rss();
  }

  start(): void {
    this.timer = setInterval(() => {
      try {
        this.check(performance.now());
      } catch {
        // Reading the resident size opens /proc/self/stat: with every file descriptor taken (EMFILE, a flood of
        // connections) it throws, and a throw in a timer would end the process. The next look tries again.
      }
    }, this.options.checkEveryMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** One look: exposed so that tests can drive the clock. */
  check(now: number): boolean {
    // Memory that went back down by itself moves the baseline with it, busy or not: a baseline read in the middle of
    // the start (the embedded database loading) sat above where the gateway settled, and hid the growth of a burst.
    const rss = this.rss();
    if (rss < this.baseline) this.baseline = rss;
    const { started, inFlight } = this.options.traffic();
    if (started !== this.lastStarted || inFlight > 0) {
      this.lastStarted = started;
      this.quietSince = now;
      return false;
    }
    if (now - this.quietSince < this.options.idleForMs) return false;
    const before = rss;
    if (before - this.baseline < this.options.minGrowthBytes) return false;
    const t0 = performance.now();
    this.collect();
    const after = this.rss();
    this.baseline = after;
    this.options.onRelease?.(before, after, performance.now() - t0);
    return true;
  }
}
