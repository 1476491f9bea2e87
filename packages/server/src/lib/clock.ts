/** Monotonic milliseconds, for durations. */
export function monoMs(): number {
  return performance.now();
}

const ORIGIN_MS = performance.timeOrigin;

/**
 * Whole milliseconds of the monotonic clock counted from the wall time the process started at: as large as
 * Date.now()'s (a 0 kept for "never" stays long ago), but a step of the wall clock (NTP, an operator) does not move
 * it. For times kept in this process only: none of them may be written where another instance reads it.
 */
export function steadyMs(): number {
  return Math.floor(ORIGIN_MS + performance.now());
}

export function nowSeconds(): number {
  return Math.floor(Date.now() / 1000);
}
