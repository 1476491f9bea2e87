import { type LimitDecision, type RateLimiter, WINDOW_MS } from './types.js';

/**
 * SPEC's sliding window in process memory: per key, the timestamps of the
 * admitted requests of the last 60 s. One instance only.
 */
export class MemoryWindowLimiter implements RateLimiter {
  private readonly windows = new Map<string, number[]>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly now: () => number = Date.now,
    private readonly windowMs = WINDOW_MS,
  ) {
    this.sweeper = setInterval(() => this.sweep(), windowMs);
    this.sweeper.unref();
  }

  hit(keyId: string, limit: number): LimitDecision {
    return this.hitSync(keyId, limit);
  }

  hitSync(keyId: string, limit: number): LimitDecision {
    const now = this.now();
    let stamps = this.windows.get(keyId);
    if (!stamps) {
      stamps = [];
      this.windows.set(keyId, stamps);
    }
    let drop = 0;
    while (drop < stamps.length && (stamps[drop] as number) <= now - this.windowMs) drop++;
    if (drop > 0) stamps.splice(0, drop);
    const allowed = stamps.length < limit;
    if (allowed) stamps.push(now);
    const oldest = stamps[0] ?? now;
    return { allowed, limit, remaining: Math.max(0, limit - stamps.length), resetS: resetSeconds(oldest, now, this.windowMs), enforced: true };
  }

  private sweep(): void {
    const cutoff = this.now() - this.windowMs;
    for (const [id, stamps] of this.windows) {
      if (stamps.length === 0 || (stamps[stamps.length - 1] as number) <= cutoff) this.windows.delete(id);
    }
  }

  close(): void {
    clearInterval(this.sweeper);
  }
}

export function resetSeconds(oldestMs: number, nowMs: number, windowMs = WINDOW_MS): number {
  return Math.max(1, Math.ceil((oldestMs + windowMs - nowMs) / 1000));
}
