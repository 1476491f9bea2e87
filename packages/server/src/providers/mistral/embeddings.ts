import type { JsonResponse } from '../http-client.js';
import { parseEmbeddingsList } from '../openai-compatible/embeddings.js';
import type { EmbeddingsRequest, EmbeddingsResult } from '../types.js';
import { mistralError } from './errors.js';

/** Mistral's strict embeddings schema: `dimensions` is `output_dimension`, no `user`, no `encoding_format` needed (floats by default). */
export function toMistralEmbeddingsBody(request: EmbeddingsRequest, upstreamModel: string): Record<string, unknown> {
  return {
    model: upstreamModel,
    input: request.input,
    ...(request.dimensions === undefined ? {} : { output_dimension: request.dimensions }),
  };
}

/** OpenAI's list shape; usage's extra keys (`completion_tokens`, `prompt_audio_seconds`) are not kept. */
export function parseMistralEmbeddings(provider: string, res: JsonResponse, inputs: number): EmbeddingsResult {
  if (res.status < 200 || res.status >= 300) throw mistralError(provider, res);
  return parseEmbeddingsList(provider, res, inputs);
}
