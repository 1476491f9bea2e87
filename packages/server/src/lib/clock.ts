/** Monotonic milliseconds, for durations. */
export function monoMs(): number {
  return performance.now();
}

export function nowSeconds(): number {
  return Math.floor(Date.now() / 1000);
}
