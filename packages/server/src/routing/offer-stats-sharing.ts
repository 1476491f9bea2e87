import { randomUUID } from 'node:crypto';
import type { Bus } from '../kv/types.js';
import type { Observation, OfferStats } from './offer-stats.js';

export const OFFER_STATS_CHANNEL = 'gw:offer-stats';
/** Observations are published in batches at most this often. */
export const SHARE_INTERVAL_MS = 50;
/** While Redis is away, at most this many unsent observations are kept (the oldest are dropped). */
const MAX_PENDING = 2_000;

interface Batch {
  from: string;
  obs: Observation[];
}

/**
 * Shares what each instance learns about offers over Redis pub/sub: every
 * instance publishes its own observations in small batches and applies the
 * others' to its own circuits and measures, so all of them skip an offer
 * that fails on any one. A Redis outage only stops the sharing: each
 * instance goes on with what it learns itself.
 */
export class OfferStatsSharing {
  private readonly instance = randomUUID();
  /** How this instance's own batches begin (JSON.stringify keeps the key order of `Batch`). */
  private readonly ownPrefix = `{"from":${JSON.stringify(this.instance)},`;
  private pending: Observation[] = [];
  private publishing = false;
  private readonly timer: NodeJS.Timeout;

  private constructor(
    private readonly bus: Bus,
    private readonly stats: OfferStats,
  ) {
    stats.onLocal((o) => {
      this.pending.push(o);
      if (this.pending.length > MAX_PENDING) this.pending.splice(0, this.pending.length - MAX_PENDING);
    });
    this.timer = setInterval(() => this.flush(), SHARE_INTERVAL_MS);
    this.timer.unref();
  }

  static async start(bus: Bus, stats: OfferStats): Promise<OfferStatsSharing> {
    const sharing = new OfferStatsSharing(bus, stats);
    await bus.subscribe(OFFER_STATS_CHANNEL, (message) => sharing.receive(message));
    return sharing;
  }

  private flush(): void {
    if (this.publishing || this.pending.length === 0) return;
    const batch: Batch = { from: this.instance, obs: this.pending };
    this.pending = [];
    this.publishing = true;
    this.bus
      .publish(OFFER_STATS_CHANNEL, JSON.stringify(batch))
      .catch(() => {
        // Redis is away: these lessons stay local.
      })
      .finally(() => {
        this.publishing = false;
      });
  }

  private receive(message: string): void {
    // Every instance hears its own batches too: those are known by their first bytes, without parsing them.
    if (message.startsWith(this.ownPrefix)) return;
    let batch: Batch;
    try {
      batch = JSON.parse(message) as Batch;
    } catch {
      return;
    }
    if (batch.from === this.instance || !Array.isArray(batch.obs)) return;
    for (const o of batch.obs) if (isObservation(o)) this.stats.apply(o);
  }

  close(): void {
    clearInterval(this.timer);
    this.flush();
  }
}

function isObservation(o: unknown): o is Observation {
  const x = o as Partial<Observation> | null;
  return (
    typeof x?.offer === 'string' &&
    (x.outcome === 'ok' || x.outcome === 'error' || x.outcome === 'timeout') &&
    typeof x.ms === 'number' &&
    (x.mode === 'stream' || x.mode === 'full') &&
    (x.waitMs === undefined || (typeof x.waitMs === 'number' && x.waitMs >= 0))
  );
}
