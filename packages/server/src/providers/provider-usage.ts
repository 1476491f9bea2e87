import type { TokenUsage } from './types.js';

/** The largest count taken from a provider: two of them still sum within the store's 32-bit integer columns. */
export const MAX_PROVIDER_TOKENS = 1_000_000_000;

/** A provider's count as whole tokens (a number or a numeric string, a fraction rounded up), or null: none, or negative. */
function count(value: unknown): number | null {
  const n = typeof value === 'number' ? value : typeof value === 'string' && value.trim() !== '' ? Number(value) : Number.NaN;
  return Number.isFinite(n) && n >= 0 ? Math.min(MAX_PROVIDER_TOKENS, Math.ceil(n)) : null;
}

function wholeCount(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0 && value <= MAX_PROVIDER_TOKENS;
}

/**
 * A provider's chat `usage` as the gateway bills it and tells it: prompt and completion counts that are whole
 * non-negative numbers (read from a numeric string or rounded up from a fraction; one that is missing made from
 * `total_tokens` and the other), and a `total_tokens` (their sum where the provider's is none). The same object when
 * it already is so, the usual case, which costs a few type checks. Null when it gives no two counts: the answer is
 * billed at the gateway's estimate, as one without usage. (Taken as they came, a negative was billed as nothing, and
 * text or a fraction reached the store, which refused the record: the request was never billed.)
 */
export function providerUsage(raw: unknown): (TokenUsage & Record<string, unknown>) | null {
  if (raw === null || typeof raw !== 'object') return null;
  const u = raw as TokenUsage & Record<string, unknown>;
  if (wholeCount(u.prompt_tokens) && wholeCount(u.completion_tokens) && wholeCount(u.total_tokens)) return u;
  let prompt = count(u.prompt_tokens);
  let completion = count(u.completion_tokens);
  const total = count(u.total_tokens);
  if (prompt === null && completion !== null && total !== null && total >= completion) prompt = total - completion;
  if (completion === null && prompt !== null && total !== null && total >= prompt) completion = total - prompt;
  if (prompt === null || completion === null) return null;
  return {
    ...u,
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: total !== null && total >= prompt + completion ? total : prompt + completion,
  };
}
