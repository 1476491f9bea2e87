import type { TokenUsage } from './types.js';

/**
 * What a chat answer is billed at when its provider reported no usage: the
 * prompt as the gateway counted it for the budget hold, and about 4
 * characters a token of what was generated, at most `completionCap` (what
 * the request may be billed: `max_tokens` times `n`, or what the window leaves).
 */
export function estimatedUsage(promptTokens: number, generatedChars: number, completionCap: number): TokenUsage {
  const completion = Math.min(Math.ceil(generatedChars / 4), completionCap);
  return { prompt_tokens: promptTokens, completion_tokens: completion, total_tokens: promptTokens + completion };
}

/**
 * `usage` as the client is told it, what it is billed: its prompt count `prompt` (the provider's, at most what the
 * request could cost) and its completion count no higher than `completionCap`.
 */
export function usageAtMost<U extends TokenUsage>(usage: U, prompt: number, completionCap: number): U {
  if (usage.completion_tokens <= completionCap && usage.prompt_tokens === prompt) return usage;
  const completion = Math.min(usage.completion_tokens, completionCap);
  return { ...usage, prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}

/**
 * Tokens of texts before the provider counts them: `charsPerToken` 3 overestimates (budget holds, bills without a count),
 * 4 is the usual average (beta window). `perText` caps each text (a model's context: no provider bills more for one).
 */
export function estimateTokens(texts: string[], charsPerToken: number, perText = Number.POSITIVE_INFINITY): number {
  return texts.reduce((n, t) => n + Math.max(1, Math.min(perText, Math.ceil(t.length / charsPerToken))), 0);
}

interface Generated {
  content?: unknown;
  reasoning_content?: unknown;
  tool_calls?: unknown;
  function_call?: { name?: unknown; arguments?: unknown };
}

/**
 * Characters generated in one message or delta: its content, its reasoning, and its tool calls' names and arguments
 * (or its function call's, as a client of the functions API is streamed it).
 */
export function generatedChars(part: Generated | undefined): number {
  if (!part) return 0;
  let n = 0;
  if (typeof part.content === 'string') n += part.content.length;
  if (typeof part.reasoning_content === 'string') n += part.reasoning_content.length;
  if (Array.isArray(part.tool_calls)) {
    for (const call of part.tool_calls as { function?: { name?: unknown; arguments?: unknown } }[]) {
      if (typeof call?.function?.name === 'string') n += call.function.name.length;
      if (typeof call?.function?.arguments === 'string') n += call.function.arguments.length;
    }
  }
  const fn = part.function_call;
  if (fn !== undefined) {
    if (typeof fn?.name === 'string') n += fn.name.length;
    if (typeof fn?.arguments === 'string') n += fn.arguments.length;
  }
  return n;
}
