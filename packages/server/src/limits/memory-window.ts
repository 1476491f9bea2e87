import { waitSeconds } from '../errors/gateway-error.js';
import { StampRing } from './stamp-ring.js';
import { type LimitDecision, type RateLimiter, WINDOW_MS } from './types.js';

/**
 * The clock of windows kept in process memory: monotonic, so that the wall clock stepped (NTP, an operator) neither
 * empties a window at once (a forward step admitted a new burst) nor holds it full (a backward step of two minutes
 * told clients to wait three). Only differences of its readings mean anything; none leaves the process as a time.
 * Whole milliseconds, as Date.now gave: with fractions, (now + window) - now came out a hair over the window, and a
 * decision made at the instant of its own stamp answered X-RateLimit-Reset 61.
 */
export const monotonicMs = (): number => Math.floor(performance.now());

/**
 * SPEC's sliding window in process memory: per key, the timestamps of the
 * admitted requests of the last 60 s. One instance only.
 */
export class MemoryWindowLimiter implements RateLimiter {
  private readonly windows = new Map<string, StampRing>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly now: () => number = monotonicMs,
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
      stamps = new StampRing();
      this.windows.set(keyId, stamps);
    }
    stamps.dropThrough(now - this.windowMs);
    const allowed = stamps.size < limit;
    if (allowed) stamps.push(now);
    return windowDecision(allowed, stamps.size, limit, freeingStamp(stamps, limit) ?? now, now, this.windowMs);
  }

  peek(keyId: string, limit: number): LimitDecision {
    const now = this.now();
    const stamps = this.windows.get(keyId);
    stamps?.dropThrough(now - this.windowMs);
    const size = stamps?.size ?? 0;
    const freeing = stamps ? freeingStamp(stamps, limit) : undefined;
    return windowDecision(size < limit, size, limit, freeing ?? now, now, this.windowMs);
  }

  /** How many stamps `keyId`'s window holds and has room for (for tests). */
  windowOf(keyId: string): { size: number; capacity: number } | undefined {
    const stamps = this.windows.get(keyId);
    return stamps && { size: stamps.size, capacity: stamps.capacity };
  }

  /** Forgets keys whose window emptied, and shrinks the rings of keys that went quiet. */
  sweep(): void {
    const cutoff = this.now() - this.windowMs;
    for (const [id, stamps] of this.windows) {
      stamps.dropThrough(cutoff);
      if (stamps.size === 0) this.windows.delete(id);
      else stamps.shrink();
    }
  }

  close(): void {
    clearInterval(this.sweeper);
  }
}

/**
 * The stamp whose leaving frees a place: the oldest, unless the limit was lowered below what the window holds, then
 * the one `size - limit` places after it (a request fits once the window holds fewer than `limit`).
 */
function freeingStamp(stamps: StampRing, limit: number): number | undefined {
  return stamps.at(Math.max(0, stamps.size - limit));
}

/** An enforced decision over a window holding `count` requests, the one whose leaving frees a place at `oldestMs`. */
export function windowDecision(allowed: boolean, count: number, limit: number, oldestMs: number, nowMs: number, windowMs: number): LimitDecision {
  const waitMs = oldestMs + windowMs - nowMs;
  return { allowed, limit, remaining: Math.max(0, limit - count), resetS: waitSeconds(waitMs), waitMs, enforced: true };
}
