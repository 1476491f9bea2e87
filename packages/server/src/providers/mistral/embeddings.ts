import { type EmbedBatch, longestFirst } from '../embed-batches.js';
import type { JsonResponse } from '../http-client.js';
import { parseEmbeddingsList } from '../openai-compatible/embeddings.js';
import type { EmbeddingsRequest, EmbeddingsResult } from '../types.js';
import { estimateTokens } from '../usage-estimate.js';
import { mistralError, mistralMessage } from './errors.js';

/** Mistral refuses an embeddings call over this many tokens, all inputs together ("Too many tokens in batch. Max is 16384 got N"). */
export const EMBED_BATCH_TOKENS = 16_384;

/** Mistral's strict embeddings schema: `dimensions` is `output_dimension`, no `user`, no `encoding_format` needed (floats by default). */
export function toMistralEmbeddingsBody(request: EmbeddingsRequest, texts: string[], upstreamModel: string): Record<string, unknown> {
  return {
    model: upstreamModel,
    input: texts,
    ...(request.dimensions === undefined ? {} : { output_dimension: request.dimensions }),
  };
}

/**
 * The inputs in runs whose tokens, at the gateway's estimate of one per 3 characters (above Mistral's count for
 * European text), fit Mistral's batch limit; an input estimated over the limit goes alone, for Mistral to take or
 * refuse. The run holding the longest input goes first: if Mistral refuses that input as longer than the model's
 * context, no other call was made, so nothing was paid.
 */
export function embedBatches(input: string[], limit = EMBED_BATCH_TOKENS): EmbedBatch[] {
  const batches: EmbedBatch[] = [];
  let current: EmbedBatch | null = null;
  let tokens = 0;
  for (const [i, text] of input.entries()) {
    const own = estimateTokens([text], 3);
    if (current === null || tokens + own > limit) {
      current = { start: i, texts: [] };
      batches.push(current);
      tokens = 0;
    }
    current.texts.push(text);
    tokens += own;
  }
  return longestFirst(batches);
}

/** Mistral's 400 for a call over its batch limit (in either of its wordings), which it does not bill. */
export function overBatchLimit(res: JsonResponse): boolean {
  return res.status === 400 && /too many tokens (in batch|overall)/i.test(mistralMessage(res.body));
}

/** OpenAI's list shape; usage's extra keys (`completion_tokens`, `prompt_audio_seconds`) are not kept. */
export function parseMistralEmbeddings(provider: string, res: JsonResponse, inputs: number): EmbeddingsResult {
  if (res.status < 200 || res.status >= 300) throw mistralError(provider, res);
  return parseEmbeddingsList(provider, res, inputs);
}
