import { UpstreamError } from '../errors/upstream-error.js';
import { answeredErrorObject } from './error-status.js';
import { isStreamErrorObject } from './sse-chunk-stream.js';

/** A chat completion's body, or the provider fault it is: not JSON, or no choices (a 200 without an answer). */
export function withChoices(provider: string, body: unknown): Record<string, unknown> & { choices: unknown[] } {
  if (typeof body === 'string') {
    throw new UpstreamError({ kind: 'protocol', provider, message: `${provider} answered a chat completion with a body that is not JSON` });
  }
  // An empty body is read as null (http-client.ts): said as what it is, not as an answer that lacked its choices.
  if (body === null || body === undefined) {
    throw new UpstreamError({ kind: 'protocol', provider, message: `${provider} answered a chat completion with an empty body` });
  }
  const b = body as Record<string, unknown> | null;
  // A choice that is no object (`choices: [null]`) is no answer either: read as one, it failed the route with a 500.
  const choices = b && typeof b === 'object' ? b['choices'] : undefined;
  if (!Array.isArray(choices) || choices.length === 0 || !choices.every((c) => c !== null && typeof c === 'object' && !Array.isArray(c))) {
    // An error object in place of the completion: its words, and a refusal of the request stays the client's.
    if (b && typeof b === 'object' && choices === undefined && isStreamErrorObject(b)) throw answeredErrorObject(provider, b);
    throw new UpstreamError({ kind: 'protocol', provider, message: `${provider} answered a chat completion without choices` });
  }
  return b as Record<string, unknown> & { choices: unknown[] };
}

/** The finish reasons OpenAI's clients know. */
const OPENAI_FINISH_REASONS = new Set(['stop', 'length', 'tool_calls', 'content_filter', 'function_call']);

/** Whether a finish reason needs {@link mapFinishReason} (null, the usual one mid-stream, does not). */
export function isOpenAiFinishReason(reason: unknown): boolean {
  return reason === null || reason === undefined || OPENAI_FINISH_REASONS.has(reason as string);
}

/**
 * Finish reasons in OpenAI's words: Mistral's (and some vLLM hosts') `model_length` is `length`; an
 * `error` finish is a failed generation, raised so routing can retry elsewhere.
 */
export function mapFinishReason(provider: string, reason: unknown): unknown {
  if (reason === 'model_length') return 'length';
  if (reason === 'error')
    throw new UpstreamError({ kind: 'http', provider, status: 502, message: `${provider} ended the generation with finish_reason "error"` });
  return reason;
}

/** Tool calls arrive whole; `arguments` may be an object in Mistral's schema, OpenAI's is a string. */
export function mapToolCalls(calls: unknown): unknown {
  if (!Array.isArray(calls)) return calls;
  return calls.map((call) => {
    const c = (call ?? {}) as { function?: { name?: unknown; arguments?: unknown } };
    const args = c.function?.arguments;
    return { ...c, function: { ...c.function, arguments: typeof args === 'string' ? args : JSON.stringify(args ?? {}) } };
  });
}

/**
 * Streamed tool-call fragments: `arguments` sent as an object becomes its JSON string; none (null, or absent) becomes
 * '', as OpenAI's clients read it, since the fragments that follow are appended to it ('{}' made `{}{"city":…}`).
 */
export function mapToolCallDeltas(calls: unknown): unknown {
  if (!Array.isArray(calls)) return calls;
  return calls.map((call) => {
    const c = (call ?? {}) as { function?: { name?: unknown; arguments?: unknown } };
    const args = c.function?.arguments;
    if (typeof args === 'string') return call;
    return { ...c, function: { ...c.function, arguments: args === null || args === undefined ? '' : JSON.stringify(args) } };
  });
}

/**
 * The API's sampling defaults (SPEC: temperature 1.0, top_p 1.0), sent rather than left to the host: hosts default
 * otherwise (Mistral by model; vLLM from each model's generation config, 0.6 / 0.9 for Llama 3.3), and a request
 * should sample alike wherever it is routed. Not for Azure: its reasoning deployments refuse both, even at 1.
 * Set on the upstream body the adapter already made (its own copy), so that the client's body is not copied again.
 */
export function fillSamplingDefaults(upstream: Record<string, unknown>): Record<string, unknown> {
  upstream['temperature'] ??= 1;
  upstream['top_p'] ??= 1;
  return upstream;
}

/** Whether a content part is one of Mistral's `thinking` parts (its reasoning, in an assistant message's content array). */
export function isThinkingPart(part: unknown): boolean {
  return (part as { type?: unknown } | null)?.type === 'thinking';
}

/**
 * Whether an assistant message says nothing once its `thinking` parts are left out: no tool calls, and no content
 * but empty text (what withoutThinking makes `""`). Mistral's adapter leaves such a message out; the chat route's walk
 * asks it to see the conversation as Mistral gets it. No allocation: a string's content is answered at once.
 */
export function saysNothing(message: Record<string, unknown>): boolean {
  const calls = message['tool_calls'];
  if (Array.isArray(calls) && calls.length > 0) return false;
  const content = message['content'];
  if (content === undefined || content === null) return true;
  if (typeof content === 'string') return content === '';
  if (!Array.isArray(content)) return false;
  for (const part of content) {
    if (isThinkingPart(part)) continue;
    const p = part as { type?: unknown; text?: unknown } | null;
    if (p?.type !== 'text' || String(p.text ?? '') !== '') return false;
  }
  return true;
}

/**
 * An assistant message's content parts without Mistral's `thinking` ones, which no provider takes back; text parts
 * alone become the string they make, as an answer's content is (`""` for none).
 */
export function withoutThinking(content: unknown[]): unknown {
  const kept = content.filter((part) => !isThinkingPart(part));
  const allText = kept.every((part) => (part as { type?: unknown } | null)?.type === 'text');
  return allText ? kept.map((part) => String((part as { text?: unknown }).text ?? '')).join('') : kept;
}
