/**
 * Deterministic log probabilities in OpenAI's shape (`choices[].logprobs.content[]`), as vLLM and Azure answer
 * `logprobs: true`: one entry per generated piece (each piece is one token), with `top_logprobs` alternatives.
 */

export interface TopLogprob {
  token: string;
  logprob: number;
  bytes: number[];
}

export interface TokenLogprob extends TopLogprob {
  top_logprobs: TopLogprob[];
}

/** The alternatives a position offers besides the chosen token, most likely first. */
const ALTERNATIVES = [
  ' the',
  ',',
  ' and',
  '.',
  ' a',
  ' of',
  ' to',
  ' in',
  ' is',
  ' that',
  ' it',
  ' for',
  ' on',
  ' with',
  ' as',
  ' was',
  ' at',
  ' by',
  ' an',
  ' be',
  ' this',
];

/** The most `top_logprobs` a request may ask for (OpenAI's and vLLM's default bound). */
export const MAX_TOP_LOGPROBS = 20;

const bytesOf = (token: string): number[] => [...Buffer.from(token, 'utf8')];

/** A stable number in [0, 1) for a token at a position, so an answer's logprobs are the same streamed or not. */
function unit(token: string, position: number): number {
  let h = 2166136261 ^ position;
  for (let i = 0; i < token.length; i++) h = Math.imul(h ^ token.charCodeAt(i), 16777619);
  return (h >>> 0) / 2 ** 32;
}

const round = (x: number): number => Math.round(x * 1e6) / 1e6;

/**
 * The logprobs of `tokens`, each with `top` alternatives: the chosen token first (it is the most likely), then
 * others sharing what probability it leaves, each half the one before, so the probabilities never add up past 1.
 */
export function tokenLogprobs(tokens: string[], top: number): TokenLogprob[] {
  return tokens.map((token, position) => {
    const p = 0.35 + 0.64 * unit(token, position);
    const chosen = { token, logprob: round(Math.log(p)), bytes: bytesOf(token) };
    const tops: TopLogprob[] = top > 0 ? [chosen] : [];
    let share = (1 - p) / 2;
    for (const alt of ALTERNATIVES) {
      if (tops.length >= top) break;
      if (alt === token) continue;
      tops.push({ token: alt, logprob: round(Math.log(share)), bytes: bytesOf(alt) });
      share /= 2;
    }
    return { ...chosen, top_logprobs: tops };
  });
}
