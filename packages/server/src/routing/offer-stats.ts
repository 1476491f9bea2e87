import { steadyMs } from '../lib/clock.js';
import { CircuitBook, type CircuitSettings, type CircuitState } from './health.js';
import { type LatencyMode, MeasureBook } from './latency.js';
import type { Offer } from './registry.js';

export type { LatencyMode } from './latency.js';

/** How an attempt on an offer ended, as far as health and speed are concerned. */
export type AttemptOutcome = 'ok' | 'error' | 'timeout';

/** One attempt's lesson; shared between instances when Redis is configured. */
export interface Observation {
  /** `offerKey(offer)`. */
  offer: string;
  outcome: AttemptOutcome;
  ms: number;
  mode: LatencyMode;
  /** A failure whose provider named its wait (a 429's or 503's Retry-After): the offer stays out of plans that long. */
  waitMs?: number;
}

export interface OfferStatsSettings extends CircuitSettings {
  /** How long an offer may go unmeasured before `fastest` and `best` put it first once to measure it again. */
  remeasureMs: number;
}

/** An offer is a provider's upstream model: health and speed are kept per offer. */
export function offerKey(offer: Pick<Offer, 'provider' | 'upstreamModel'>): string {
  return `${offer.provider}/${offer.upstreamModel}`;
}

/** What planning reads (and the one mark it leaves: which offer it put first to re-measure). */
export interface OfferStatsView {
  available(offer: Offer): boolean;
  /** Milliseconds until an open circuit lets a probe through. */
  remainingMs(offer: Offer): number;
  latencyMs(offer: Offer, mode: LatencyMode): number | null;
  successRate(offer: Offer): number | null;
  dueForRemeasure(offer: Offer, mode: LatencyMode): boolean;
  lastMeasuredAt(offer: Offer, mode: LatencyMode): number;
  /** Counts a plan for `scope` (model and mode); true when it may re-measure an offer measured before. */
  explorationTurn(scope: string): boolean;
  markExplored(offer: Offer, mode: LatencyMode, scope: string): void;
}

/**
 * This instance's knowledge of every offer: circuits (health.ts) and
 * moving measures (latency.ts). Local attempts are recorded here and
 * handed to `onLocal` listeners (the Redis sharing); other instances'
 * observations arrive through `apply`.
 */
export class OfferStats implements OfferStatsView {
  private readonly circuits: CircuitBook;
  private readonly measures: MeasureBook;
  private readonly listeners: ((o: Observation) => void)[] = [];

  constructor(
    settings: OfferStatsSettings,
    // Steady, not the wall clock: a step back of two minutes held an open circuit's offer out (503) for two more.
    private readonly now: () => number = steadyMs,
  ) {
    this.circuits = new CircuitBook(settings);
    this.measures = new MeasureBook(settings.remeasureMs);
  }

  available(offer: Offer): boolean {
    return this.circuits.available(offerKey(offer), this.now());
  }

  circuit(offer: Offer): CircuitState {
    return this.circuits.state(offerKey(offer), this.now());
  }

  remainingMs(offer: Offer): number {
    return this.circuits.remainingMs(offerKey(offer), this.now());
  }

  latencyMs(offer: Offer, mode: LatencyMode): number | null {
    return this.measures.latencyMs(offerKey(offer), mode);
  }

  successRate(offer: Offer): number | null {
    return this.measures.successRate(offerKey(offer));
  }

  /** Whether the offer answered an attempt (any request's, on any instance) in the last `ms`. */
  answeredWithin(offer: Offer, ms: number): boolean {
    return this.measures.lastOkAt(offerKey(offer)) > this.now() - ms;
  }

  dueForRemeasure(offer: Offer, mode: LatencyMode): boolean {
    return this.measures.dueForRemeasure(offerKey(offer), mode, this.now());
  }

  lastMeasuredAt(offer: Offer, mode: LatencyMode): number {
    return this.measures.lastMeasuredAt(offerKey(offer), mode);
  }

  explorationTurn(scope: string): boolean {
    return this.measures.explorationTurn(scope);
  }

  markExplored(offer: Offer, mode: LatencyMode, scope: string): void {
    this.measures.markExplored(offerKey(offer), mode, scope, this.now());
  }

  /** An attempt begins (on a half-open circuit it may be the probe): the probe's number, 0 when it is none. */
  started(offer: Offer): number {
    return this.circuits.started(offerKey(offer), this.now());
  }

  /**
   * An attempt ended without telling anything about the offer (the client left, or the request was refused as
   * invalid); `probe`: what {@link started} returned for it.
   */
  abandoned(offer: Offer, probe: number): void {
    this.circuits.abandoned(offerKey(offer), probe);
  }

  /** Records this instance's attempt and tells the listeners. */
  record(offer: Offer, outcome: AttemptOutcome, ms: number, mode: LatencyMode, waitMs?: number): void {
    const observation: Observation =
      waitMs === undefined ? { offer: offerKey(offer), outcome, ms, mode } : { offer: offerKey(offer), outcome, ms, mode, waitMs };
    this.apply(observation);
    for (const listener of this.listeners) listener(observation);
  }

  /** Applies an observation, made here or by another instance. */
  apply(o: Observation): void {
    const now = this.now();
    if (o.outcome === 'ok') this.circuits.success(o.offer, now);
    else this.circuits.failure(o.offer, now, o.waitMs);
    this.measures.addOutcome(o.offer, o.outcome === 'ok', now);
    // A plain error says nothing about speed (it may fail fast); a timeout says the offer is slow.
    if (o.outcome !== 'error') this.measures.addLatency(o.offer, o.mode, o.ms, now);
  }

  onLocal(listener: (o: Observation) => void): void {
    this.listeners.push(listener);
  }
}
