/** How long failures count as "in a row": a failure more than this after the previous one starts a new count. */
export const CIRCUIT_WINDOW_MS = 60_000;

/**
 * The longest a provider's own wait (a 429's or 503's Retry-After) keeps its offer out of plans: a wrong header
 * (a date hours ahead) must not take an offer out for long; after it, a probe asks the provider again.
 */
export const MAX_PROVIDER_WAIT_MS = 60_000;

export interface CircuitSettings {
  /** Failures in a row (each within CIRCUIT_WINDOW_MS of the previous) that open the circuit. */
  failures: number;
  /** How long an open circuit keeps the offer out of every plan before a probe may try it. */
  openMs: number;
}

export type CircuitState = 'closed' | 'open' | 'half_open';

/** The last probe's number: an attempt that ends without a verdict frees the half-open slot only if it holds it. */
let probes = 0;

interface Circuit {
  failures: number;
  lastFailureAt: number;
  /** 0: closed. Otherwise open until then, and half-open after. */
  openUntil: number;
  /** The probe of this instance in flight (half-open lets one through at a time), by its number; 0: none. */
  probe: number;
  /** Until then the provider asked not to be called (its Retry-After); 0: it did not. */
  waitUntil: number;
}

/**
 * One circuit per offer: closed while the offer answers; open (skipped by
 * every plan) for `openMs` after `failures` failures in a row; then
 * half-open, letting one probe through: its success closes the circuit,
 * its failure opens it again for another `openMs` (or the wait it names). A provider that names
 * its wait (a 429's or 503's Retry-After) opens it at once until then
 * (at most MAX_PROVIDER_WAIT_MS), and the answers of attempts begun
 * before do not close it early.
 */
export class CircuitBook {
  private readonly circuits = new Map<string, Circuit>();

  constructor(private readonly settings: CircuitSettings) {}

  state(key: string, now: number): CircuitState {
    const c = this.circuits.get(key);
    if (!c || c.openUntil === 0) return 'closed';
    return now < c.openUntil ? 'open' : 'half_open';
  }

  /** May a plan include this offer now? Closed: yes; open: no; half-open: only while no probe is in flight. */
  available(key: string, now: number): boolean {
    const state = this.state(key, now);
    if (state === 'closed') return true;
    return state === 'half_open' && (this.circuits.get(key)?.probe ?? 0) === 0;
  }

  /** Milliseconds until an open circuit lets a probe through (0 when it already would). */
  remainingMs(key: string, now: number): number {
    const c = this.circuits.get(key);
    return c && c.openUntil > now ? c.openUntil - now : 0;
  }

  /**
   * An attempt on this offer begins; on a half-open circuit with no probe in flight it is the probe. Returns the
   * probe's number, for {@link abandoned}; 0 when the attempt is no probe.
   */
  started(key: string, now: number): number {
    const c = this.circuits.get(key);
    if (c?.probe !== 0 || this.state(key, now) !== 'half_open') return 0;
    c.probe = ++probes;
    return c.probe;
  }

  /**
   * An attempt ended without a verdict (the client left): nothing is learned, and the probe's slot is freed if it held
   * it. Another attempt's end (one begun before the circuit opened) leaves the probe in flight its slot.
   */
  abandoned(key: string, probe: number): void {
    const c = this.circuits.get(key);
    if (c && probe !== 0 && c.probe === probe) c.probe = 0;
  }

  /**
   * Any answer (here or, with Redis, on another instance) closes the circuit; while the provider's own wait
   * runs, it is an attempt begun before it asked (its limit let that one in) and the offer stays out.
   */
  success(key: string, now: number): void {
    const c = this.circuits.get(key);
    if (c === undefined) return;
    if (now < c.waitUntil) c.probe = 0;
    else this.circuits.delete(key);
  }

  /** `waitMs`: the provider asked not to be called for that long (its Retry-After); the circuit opens at once until then. */
  failure(key: string, now: number, waitMs = 0): void {
    const c = this.circuits.get(key) ?? { failures: 0, lastFailureAt: 0, openUntil: 0, probe: 0, waitUntil: 0 };
    this.circuits.set(key, c);
    const state = this.state(key, now);
    c.probe = 0;
    if (waitMs > 0) {
      c.waitUntil = Math.max(c.waitUntil, now + Math.min(waitMs, MAX_PROVIDER_WAIT_MS));
      c.openUntil = Math.max(c.openUntil, c.waitUntil);
    }
    if (state === 'open') return;
    if (state === 'half_open') {
      // The probe (or another instance's attempt) failed: stay out for another period, or for the wait it named
      // (set above), which may be shorter: the provider said when to ask again.
      if (waitMs <= 0) c.openUntil = Math.max(c.openUntil, now + this.settings.openMs);
      return;
    }
    c.failures = now - c.lastFailureAt > CIRCUIT_WINDOW_MS ? 1 : c.failures + 1;
    c.lastFailureAt = now;
    // A failure that names its wait opened the circuit for that wait (above), also when it is the one that reaches
    // the count: the provider said when to ask again, as in half-open. Else an offer out for 2 s stayed out 30.
    if (c.failures >= this.settings.failures && waitMs <= 0) c.openUntil = Math.max(c.openUntil, now + this.settings.openMs);
  }
}
