import { describe, expect, it } from 'vitest';
import { KeptAnswerAllowance } from '../src/routing/kept-answers.js';

/** Counts the walks over the allowance's map (its sweeps) and the entries they visit. */
function walksOf(allowance: KeptAnswerAllowance): { walks: number; visited: number; size: () => number } {
  const map = (allowance as unknown as { byKey: Map<string, unknown> }).byKey;
  const counts = { walks: 0, visited: 0, size: () => map.size };
  const iterate = Map.prototype[Symbol.iterator];
  Object.defineProperty(map, Symbol.iterator, {
    value: function* (this: Map<string, unknown>) {
      counts.walks++;
      for (const entry of iterate.call(this)) {
        counts.visited++;
        yield entry;
      }
    },
  });
  return counts;
}

describe('KeptAnswerAllowance', () => {
  it('30,000 API keys keeping answers within a day are swept a few times, not once per key past 10,000', () => {
    const allowance = new KeptAnswerAllowance(2 ** 20);
    const counts = walksOf(allowance);
    for (let i = 0; i < 30_000; i++) expect(allowance.take(`key_${i}`, 100)).toBe(true);
    // Each sweep finds every key live; sweeping again only once the map doubled makes two sweeps (at 10,000 and 20,000).
    expect(counts.walks).toBeLessThanOrEqual(2);
    expect(counts.visited).toBeLessThanOrEqual(30_000);
    expect(counts.size()).toBe(30_000);
  });

  it('keys whose window ran out are swept, so the map stays bounded by the keys of one window', () => {
    const allowance = new KeptAnswerAllowance(2 ** 20, 0);
    const counts = walksOf(allowance);
    for (let i = 0; i < 50_000; i++) allowance.take(`key_${i}`, 100);
    expect(counts.size()).toBeLessThanOrEqual(10_000);
    expect(counts.walks).toBeLessThanOrEqual(5);
  });
});
