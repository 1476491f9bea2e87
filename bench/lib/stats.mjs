/** Percentiles of raw samples (ms), exact: the samples are kept, not bucketed. */
export function summarise(samples) {
  // A plain array and a comparator: one full run reported a typed-array sort's summary of another side's samples.
  const sorted = Array.from(samples, Number).sort((a, b) => a - b);
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

/** The first percentile of `merged` outside the range of the rounds' own, or null. */
function outsideRounds(merged, perRound) {
  for (const p of ['p50', 'p99']) {
    const values = perRound.map((r) => r[p]).filter((v) => !Number.isNaN(v));
    if (values.length === 0 || Number.isNaN(merged[p])) continue;
    const lo = Math.min(...values);
    const hi = Math.max(...values);
    if (merged[p] < lo - 1e-9 || merged[p] > hi + 1e-9) return `${p}: all rounds ${merged[p]} (n ${merged.n}), rounds alone ${values.join(', ')}`;
  }
  return null;
}

/**
 * `merged` as it is when its percentiles lie between the rounds' own. A
 * merged figure outside that range is a fault of the bench: it is worked
 * out once more from the same samples (`recompute`), and the run stops
 * unless that one is consistent; no target verdict may be drawn from it.
 * (Seen once in a full run, on the direct side's samples at 50 ms, with
 * no cause found; the second computation says whether it was the data.)
 */
export function checkMergedWithinRounds(label, merged, perRound, recompute) {
  const fault = outsideRounds(merged, perRound);
  if (fault === null) return merged;
  const again = recompute();
  const still = outsideRounds(again, perRound);
  if (still !== null) throw new Error(`bench statistics inconsistent (${label} ${fault}; worked out again: ${still})`);
  process.stderr.write(`[bench] ${label}: a merged summary was inconsistent (${fault}); worked out again from the same samples, it is not (n ${again.n})\n`);
  return again;
}
