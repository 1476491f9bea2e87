/**
 * Cohere's OpenAI compatibility API (`https://api.cohere.ai/compatibility/v1`, PROVIDERS.md 2 and 10.3): an
 * `openai`-type entry whose vendor is `cohere`. What it refuses outright is in param-compat.ts; what it takes
 * otherwise than OpenAI is here.
 */

/** Where the compatibility API sits below Cohere's root; its native model list is at `{root}/v1/models`. */
const COMPAT_PATH = /\/compatibility\/v1$/;

/**
 * The body as Cohere takes it, changed in place (the adapter's own copy): `max_completion_tokens`, which it does not
 * list, becomes `max_tokens` (the larger of the two when both are sent, the cap the gateway holds the budget for);
 * `stream_options`, which it does not list either, is never sent, so a stream reports no usage unless Cohere adds it
 * of its own accord, and is billed at the gateway's estimate otherwise; `reasoning_effort` is only on (`high`) or off
 * (`none`) there.
 */
export function toCohereCompatBody(out: Record<string, unknown>): Record<string, unknown> {
  const completion = out['max_completion_tokens'];
  if (typeof completion === 'number') {
    const cap = out['max_tokens'];
    out['max_tokens'] = typeof cap === 'number' ? Math.max(cap, completion) : completion;
  }
  // Set undefined rather than deleted, as toUpstreamChatBody does: JSON leaves them out.
  out['max_completion_tokens'] = undefined;
  out['stream_options'] = undefined;
  const effort = out['reasoning_effort'];
  if (typeof effort === 'string' && effort !== 'none') out['reasoning_effort'] = 'high';
  return out;
}

/**
 * The compatibility API serves chat, embeddings and transcriptions, but no model list: the names are read from
 * Cohere's native `GET /v1/models` at the same root, with the same key. Null for a base that is not Cohere's
 * compatibility path (a proxy), whose `{base}/models` is read as for any OpenAI-compatible host.
 */
export function cohereModelsRoot(basePath: string): string | null {
  return COMPAT_PATH.test(basePath) ? basePath.replace(COMPAT_PATH, '') : null;
}
