import type { JsonResponse } from './http-client.js';
import type { EmbeddingsResult, UpstreamCall } from './types.js';
import { estimateTokens } from './usage-estimate.js';

/** Consecutive inputs sent in one call: where they start in the request's input, and their texts. */
export interface EmbedBatch {
  start: number;
  texts: string[];
}

/** How one provider embeds a batch: its call, whether it refused the batch as too large (unpaid), and its answer read. */
export interface BatchCalls {
  send(texts: string[]): Promise<JsonResponse>;
  tooLarge(res: JsonResponse): boolean;
  /** The batch's vectors and count; may report the batch paid and throw (an answer the request cannot use). */
  read(res: JsonResponse, texts: string[]): EmbeddingsResult;
}

/**
 * Sends the batches in turn, a batch the provider refuses as too large sent again in halves, and puts each answer's
 * vectors back at their inputs' indexes, usage summed. Each answered batch but the last is reported paid as it comes,
 * so that the request is billed it even if a later call fails.
 */
export async function embedInBatches(inputs: number, queue: EmbedBatch[], calls: BatchCalls, call: UpstreamCall): Promise<EmbeddingsResult> {
  const vectors: number[][] = new Array(inputs);
  let promptTokens = 0;
  let counted = true;
  for (let batch = queue.shift(); batch; batch = queue.shift()) {
    const res = await calls.send(batch.texts);
    if (batch.texts.length > 1 && calls.tooLarge(res)) {
      queue.unshift(...halves(batch));
      continue;
    }
    const part = calls.read(res, batch.texts);
    for (const [i, vector] of part.vectors.entries()) vectors[batch.start + i] = vector;
    if (part.promptTokens === 0) counted = false;
    promptTokens += part.promptTokens;
    if (queue.length > 0) call.paid?.({ promptTokens: part.promptTokens || estimateTokens(batch.texts, 3), completionTokens: 0, units: 0 });
  }
  // One call without a count would bill its inputs at nothing: no count at all, so the route bills its estimate of all.
  return { vectors, promptTokens: counted ? promptTokens : 0 };
}

/** A batch refused as too large, in two halves, longest first. */
export function halves(batch: EmbedBatch): EmbedBatch[] {
  const mid = Math.ceil(batch.texts.length / 2);
  return longestFirst([
    { start: batch.start, texts: batch.texts.slice(0, mid) },
    { start: batch.start + mid, texts: batch.texts.slice(mid) },
  ]);
}

/**
 * The batch holding the longest input first: if the provider refuses that input as longer than the model's context,
 * no other call was made, so nothing was paid.
 */
export function longestFirst(batches: EmbedBatch[]): EmbedBatch[] {
  const longest = (b: EmbedBatch) => Math.max(...b.texts.map((t) => t.length));
  const first = batches.reduce((best, b, i) => (longest(b) > longest(batches[best] as EmbedBatch) ? i : best), 0);
  return first === 0 ? batches : [batches[first] as EmbedBatch, ...batches.slice(0, first), ...batches.slice(first + 1)];
}
