import { steadyMs } from '../lib/clock.js';

/**
 * Skips a backend for a while after it fails, so a paused or dead Redis
 * costs one command timeout per `openMs`, not one per request. After that,
 * one trial call (half-open) decides whether it closes again. Timed on the
 * monotonic clock: on the wall clock, a step back of two minutes while it
 * was open left Redis alone for two more (idempotency keys refused with 503).
 */
export class CircuitBreaker {
  private openUntil = 0;
  private trialInFlight = false;

  constructor(private readonly openMs: number) {}

  /** true: the backend has been failing and this is the one trial call of the half-open state. */
  get probing(): boolean {
    return this.openUntil !== 0 && steadyMs() >= this.openUntil && !this.trialInFlight;
  }

  /** true: try the backend now. */
  allow(): boolean {
    const now = steadyMs();
    if (now >= this.openUntil) {
      if (this.openUntil === 0) return true;
      if (this.trialInFlight) return false;
      this.trialInFlight = true;
      return true;
    }
    return false;
  }

  success(): void {
    this.openUntil = 0;
    this.trialInFlight = false;
  }

  failure(): void {
    this.openUntil = steadyMs() + this.openMs;
    this.trialInFlight = false;
  }
}
