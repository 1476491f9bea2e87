import type { JsonResponse } from '../http-client.js';
import { parseChatCompletion, toUpstreamChatBody } from '../openai-compatible/chat.js';
import type { ChatBody, ChatCompletion } from '../types.js';
import { azureError } from './errors.js';

/**
 * `stream_options` and `max_completion_tokens` exist from api-version 2024-09-01-preview (GA 2024-10-21) and on the v1
 * API; older versions refuse them.
 */
export function supportsStreamOptions(apiVersion: string | null): boolean {
  return apiVersion === null || apiVersion >= '2024-09-01-preview';
}

/**
 * OpenAI's body as Azure takes it: `model` is the deployment (the dated API routes by URL and ignores it); one cap,
 * as OpenAI's API (Azure's) refuses `max_tokens` and `max_completion_tokens` together ("at the same time is not
 * supported"): `max_completion_tokens`, which wins on Mistral and the vLLM hosts too, or, for an api-version before
 * 2024-09-01-preview that does not know it ("Unrecognized request argument"), its value as `max_tokens`.
 */
export function toAzureChatBody(body: ChatBody, deployment: string, stream: boolean, apiVersion: string | null): Record<string, unknown> {
  const { stream_options: _so, ...rest } = toUpstreamChatBody(body, deployment);
  // `store: true` would keep the completion (and its `metadata`) in the operator's Azure resource for 30 days, where
  // its client could neither list nor delete it: not asked for (docs/adapters.md). No other provider stores completions.
  if (rest['store'] === true) {
    rest['store'] = undefined;
    rest['metadata'] = undefined;
  }
  const completion = rest['max_completion_tokens'];
  if (completion != null) {
    if (supportsStreamOptions(apiVersion)) rest['max_tokens'] = undefined;
    else {
      rest['max_tokens'] = completion;
      rest['max_completion_tokens'] = undefined;
    }
  }
  if (!stream) return rest;
  return { ...rest, stream: true, ...(supportsStreamOptions(apiVersion) ? { stream_options: { include_usage: true } } : {}) };
}

/** Azure's completion without its content-filter annotations (`prompt_filter_results`, per-choice `content_filter_results`). */
export function parseAzureCompletion(provider: string, res: JsonResponse): ChatCompletion {
  if (res.status < 200 || res.status >= 300) throw azureError(provider, res);
  const { prompt_filter_results: _p, ...completion } = parseChatCompletion(provider, res);
  return { ...completion, choices: completion.choices.map(withoutFilterResults) } as ChatCompletion;
}

export function withoutFilterResults(choice: unknown): unknown {
  if (!choice || typeof choice !== 'object') return choice;
  const { content_filter_results: _r, content_filter_offsets: _o, content_filter_raw: _w, ...rest } = choice as Record<string, unknown>;
  return rest;
}
