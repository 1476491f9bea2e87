interface Pending {
  heard: number;
  /** How many confirmations complete it: unknown (Infinity) until the publish has answered how many received it. */
  wanted: number;
  finish: (() => void) | null;
}

/**
 * Counts, per event nonce, the instances that confirmed they applied a
 * published event, for the publisher waiting on them. Every entry leaves
 * the map when its wait completes, times out or is given up.
 */
export class Confirmations {
  private readonly pending = new Map<string, Pending>();

  constructor(private readonly timeoutMs: number) {}

  /** Starts counting before the publish: a confirmation may arrive before the publish's own reply does. */
  expect(nonce: string): void {
    this.pending.set(nonce, { heard: 0, wanted: Number.POSITIVE_INFINITY, finish: null });
  }

  /** One confirmation of `nonce` (one of another instance's events, or one no longer waited for, is ignored). */
  heard(nonce: string): void {
    const entry = this.pending.get(nonce);
    if (!entry) return;
    entry.heard++;
    if (entry.heard >= entry.wanted) entry.finish?.();
  }

  /** The publish failed: nobody will confirm. */
  forget(nonce: string): void {
    this.pending.delete(nonce);
  }

  /** How many of the `receivers` did not confirm within the timeout (0: all did). */
  wait(nonce: string, receivers: number): Promise<number> {
    const entry = this.pending.get(nonce);
    if (!entry || entry.heard >= receivers) {
      this.pending.delete(nonce);
      return Promise.resolve(0);
    }
    return new Promise((resolve) => {
      const end = (missing: number) => {
        clearTimeout(timer);
        this.pending.delete(nonce);
        resolve(missing);
      };
      // Once due, one more turn of the loop (setImmediate runs after the socket reads): after the loop stalled
      // past the timeout, confirmations already waiting to be read still count.
      const timer = setTimeout(() => setImmediate(() => end(Math.max(0, receivers - entry.heard))), this.timeoutMs);
      entry.wanted = receivers;
      entry.finish = () => end(0);
    });
  }

  /** Events waited for now (tests: nothing is left behind). */
  get waiting(): number {
    return this.pending.size;
  }
}
