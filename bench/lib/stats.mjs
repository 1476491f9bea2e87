/** Percentiles of raw samples (ms), exact: the samples are kept, not bucketed. */
export function summarise(samples) {
  const sorted = Float64Array.from(samples).sort();
  const at = (p) => (sorted.length === 0 ? Number.NaN : sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]);
  let sum = 0;
  for (const v of sorted) sum += v;
  return { n: sorted.length, mean: sorted.length ? sum / sorted.length : Number.NaN, p50: at(50), p90: at(90), p99: at(99), max: at(100) };
}

/** Concatenates the sample arrays of several rounds. */
export function mergeSamples(rounds, field) {
  const out = [];
  for (const round of rounds) for (const v of round[field]) out.push(v);
  return out;
}

export function sum(values) {
  return values.reduce((a, b) => a + b, 0);
}
