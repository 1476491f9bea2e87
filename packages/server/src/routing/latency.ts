/** Weight of the newest sample in the moving latency and success measures. */
export const LATENCY_ALPHA = 0.3;
export const SUCCESS_ALPHA = 0.2;

/** With `fastest` and `best`, at most one plan in this many (per model and mode) re-measures an offer that was measured before. */
export const EXPLORE_EVERY = 10;

/** Streams are timed to their first token, other requests to their whole answer: two separate measures. */
export type LatencyMode = 'stream' | 'full';

interface Measure {
  /** Exponentially weighted moving average, ms. */
  ewmaMs: number;
  measuredAt: number;
}

interface Rate {
  /** Exponentially weighted moving share of attempts that answered, 0 to 1. */
  ewma: number;
  samples: number;
  at: number;
  /** When the offer last answered (0: not since this book began). */
  okAt: number;
}

/**
 * The weight of a new sample against a measure last moved `ageMs` ago: `alpha` for a measure kept
 * fresh by traffic, more for one that went unmeasured (an offer that lost its traffic after a timeout
 * or an error is only re-measured every `remeasureMs`; its old figure should not outweigh what the
 * re-measure finds for minutes). Each remeasure period of age counts as one sample's decay.
 */
export function stalenessWeight(alpha: number, ageMs: number, remeasureMs: number): number {
  if (!(ageMs > 0) || remeasureMs <= 0) return alpha;
  return 1 - (1 - alpha) ** (1 + ageMs / remeasureMs);
}

/**
 * What the router knows of each offer's speed and reliability: moving
 * averages that follow change, plus when each offer was last measured so
 * that slower offers are re-measured now and then (see `dueForRemeasure`).
 */
export class MeasureBook {
  private readonly latency = new Map<string, Measure>();
  private readonly rates = new Map<string, Rate>();
  /** When a plan last put an offer first to re-measure it, per mode. */
  private readonly explored = new Map<string, number>();
  /** Plans made per model and mode since the last re-measuring one. */
  private readonly plansSinceExplore = new Map<string, number>();

  constructor(private readonly remeasureMs: number) {}

  latencyMs(key: string, mode: LatencyMode): number | null {
    return this.latency.get(`${mode}|${key}`)?.ewmaMs ?? null;
  }

  successRate(key: string): number | null {
    return this.rates.get(key)?.ewma ?? null;
  }

  /** A sample of how long the offer took (an answer, or a timeout: a timed-out offer is slow). */
  addLatency(key: string, mode: LatencyMode, ms: number, now: number): void {
    const id = `${mode}|${key}`;
    const m = this.latency.get(id);
    // The first sample is the measure; later ones move it by LATENCY_ALPHA, more when the measure is stale.
    const weight = m ? stalenessWeight(LATENCY_ALPHA, now - m.measuredAt, this.remeasureMs) : 1;
    this.latency.set(id, { ewmaMs: m ? m.ewmaMs + weight * (ms - m.ewmaMs) : ms, measuredAt: now });
  }

  addOutcome(key: string, ok: boolean, now: number): void {
    const r = this.rates.get(key);
    const x = ok ? 1 : 0;
    const weight = r ? stalenessWeight(SUCCESS_ALPHA, now - r.at, this.remeasureMs) : 1;
    const okAt = ok ? now : (r?.okAt ?? 0);
    this.rates.set(key, r ? { ewma: r.ewma + weight * (x - r.ewma), samples: r.samples + 1, at: now, okAt } : { ewma: x, samples: 1, at: now, okAt });
  }

  /** When the offer last answered, here or (with Redis) on another instance; 0: not since this book began. */
  lastOkAt(key: string): number {
    return this.rates.get(key)?.okAt ?? 0;
  }

  /** Not measured (nor put first for measuring) in this mode for `remeasureMs`; never measured counts as due. */
  dueForRemeasure(key: string, mode: LatencyMode, now: number): boolean {
    const id = `${mode}|${key}`;
    const last = Math.max(this.latency.get(id)?.measuredAt ?? Number.NEGATIVE_INFINITY, this.explored.get(id) ?? Number.NEGATIVE_INFINITY);
    return now - last >= this.remeasureMs;
  }

  /** Counts a plan for `scope` (model and mode); true when enough plans passed since the last re-measure. */
  explorationTurn(scope: string): boolean {
    const n = (this.plansSinceExplore.get(scope) ?? EXPLORE_EVERY - 1) + 1;
    this.plansSinceExplore.set(scope, n);
    return n >= EXPLORE_EVERY;
  }

  /** A plan puts this offer first to measure it: no plan does so again for `remeasureMs`, nor for `scope` within EXPLORE_EVERY plans. */
  markExplored(key: string, mode: LatencyMode, scope: string, now: number): void {
    this.explored.set(`${mode}|${key}`, now);
    this.plansSinceExplore.set(scope, 0);
  }

  /** Oldest measurement first (never measured first of all), for picking which due offer to re-measure. */
  lastMeasuredAt(key: string, mode: LatencyMode): number {
    return this.latency.get(`${mode}|${key}`)?.measuredAt ?? Number.NEGATIVE_INFINITY;
  }
}
