/** The answer of the sliding-window limiter for one request. */
export interface LimitDecision {
  allowed: boolean;
  limit: number;
  remaining: number;
  /** Seconds until the oldest request in the window ages out. */
  resetS: number;
  /** The same wait in ms, exact: a refusal's retry-after-ms. */
  waitMs: number;
  /** false when the limiter backend was unreachable and the request was let through. */
  enforced: boolean;
}

export interface RateLimiter {
  /**
   * Counts one request for `id` (unique per request) against `limit` per window, unless it is over.
   * An in-process limiter answers at once; a shared one with a promise.
   */
  hit(keyId: string, limit: number, requestId: string): LimitDecision | Promise<LimitDecision>;
  /**
   * What a hit now would answer, without counting one: for a refusal before an upload is read. A shared limiter
   * that cannot answer says `allowed` (as `hit` fails open).
   */
  peek(keyId: string, limit: number): LimitDecision | Promise<LimitDecision>;
}

export const WINDOW_MS = 60_000;
