import { monotonicMs } from './memory-window.js';

/** A per-minute allowance of requests and tokens (SPEC: the embeddings beta of variant B). */
export interface BetaQuotaLimits {
  requests: number;
  tokens: number;
  windowMs: number;
}

/** SPEC: 500 requests and 200,000 tokens per minute per workspace. */
export const EMBEDDINGS_BETA: BetaQuotaLimits = { requests: 500, tokens: 200_000, windowMs: 60_000 };

export interface BetaDecision {
  allowed: boolean;
  /** Which allowance refused it. */
  reason: 'requests' | 'tokens' | null;
  /** Milliseconds until enough of the window ages out for this request (0 when it is allowed). */
  waitMs: number;
  /** false: the backend was unreachable and the request was let through. */
  enforced: boolean;
}

/**
 * A sliding window of requests and tokens per scope (a workspace). A
 * request is admitted with its estimated tokens; once the provider has
 * counted them, `settle` replaces the estimate with the real count (0 for
 * a failed call), so the window holds what was actually used.
 */
export interface BetaQuota {
  readonly limits: BetaQuotaLimits;
  admit(scope: string, requestId: string, tokens: number): Promise<BetaDecision>;
  settle(scope: string, requestId: string, tokens: number): Promise<void>;
  /** Stops its timers. */
  close(): void;
}

interface Entry {
  at: number;
  id: string;
  tokens: number;
}

/** The window in process memory; one instance only. On the monotonic clock, as every in-process window (docs/decisions.md). */
export class MemoryBetaQuota implements BetaQuota {
  private readonly windows = new Map<string, Entry[]>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    readonly limits: BetaQuotaLimits = EMBEDDINGS_BETA,
    private readonly now: () => number = monotonicMs,
  ) {
    this.sweeper = setInterval(() => this.sweep(), limits.windowMs);
    this.sweeper.unref();
  }

  async admit(scope: string, requestId: string, tokens: number): Promise<BetaDecision> {
    return this.admitSync(scope, requestId, tokens);
  }

  admitSync(scope: string, requestId: string, tokens: number): BetaDecision {
    const now = this.now();
    const entries = this.live(scope, now);
    const { requests, tokens: maxTokens, windowMs } = this.limits;
    if (entries.length >= requests) {
      return { allowed: false, reason: 'requests', waitMs: (entries[0]?.at ?? now) + windowMs - now, enforced: true };
    }
    const used = entries.reduce((n, e) => n + e.tokens, 0);
    if (used + tokens > maxTokens) {
      let freed = 0;
      let wait = windowMs;
      for (const e of entries) {
        freed += e.tokens;
        if (used - freed + tokens <= maxTokens) {
          wait = e.at + windowMs - now;
          break;
        }
      }
      return { allowed: false, reason: 'tokens', waitMs: wait, enforced: true };
    }
    entries.push({ at: now, id: requestId, tokens });
    return { allowed: true, reason: null, waitMs: 0, enforced: true };
  }

  async settle(scope: string, requestId: string, tokens: number): Promise<void> {
    const entry = this.windows.get(scope)?.find((e) => e.id === requestId);
    if (entry) entry.tokens = tokens;
  }

  private live(scope: string, now: number): Entry[] {
    let entries = this.windows.get(scope);
    if (!entries) {
      entries = [];
      this.windows.set(scope, entries);
    }
    let drop = 0;
    while (drop < entries.length && (entries[drop] as Entry).at <= now - this.limits.windowMs) drop++;
    if (drop > 0) entries.splice(0, drop);
    return entries;
  }

  private sweep(): void {
    const cutoff = this.now() - this.limits.windowMs;
    for (const [scope, entries] of this.windows) {
      if (entries.length === 0 || (entries[entries.length - 1] as Entry).at <= cutoff) this.windows.delete(scope);
    }
  }

  close(): void {
    clearInterval(this.sweeper);
  }
}
