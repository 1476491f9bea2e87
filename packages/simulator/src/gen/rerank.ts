/** Deterministic relevance scores from word overlap between query and document. */
import { wordsOf } from './text.js';
import { hash32 } from './vectors.js';

export interface Ranked {
  index: number;
  score: number;
}

/** Score in [0, 1]: share of query words found in the document, plus a small stable tie-breaker. */
export function relevance(query: string, doc: string): number {
  const q = new Set(wordsOf(query.toLowerCase()));
  const d = new Set(wordsOf(doc.toLowerCase()));
  let hits = 0;
  for (const w of q) if (d.has(w)) hits++;
  const overlap = q.size === 0 ? 0 : hits / q.size;
  const jitter = (hash32(`${query}\u0000${doc}`) % 1000) / 1000;
  return Math.round((0.02 + 0.93 * overlap + 0.05 * jitter) * 1e6) / 1e6;
}

/** Documents ranked by descending score (ties: lower index first), cut to `topN`. */
export function rank(query: string, docs: string[], topN?: number): Ranked[] {
  const ranked = docs.map((d, index) => ({ index, score: relevance(query, d) }));
  ranked.sort((a, b) => b.score - a.score || a.index - b.index);
  return topN === undefined ? ranked : ranked.slice(0, topN);
}
