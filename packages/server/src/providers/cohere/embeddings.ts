import { UpstreamError } from '../../errors/upstream-error.js';
import type { JsonResponse } from '../http-client.js';
import { tokenCount } from '../token-count.js';
import type { EmbeddingsRequest } from '../types.js';
import { cohereError } from './errors.js';

/** Cohere's embed v2 takes at most 96 texts per call. */
export const EMBED_BATCH = 96;

/**
 * Embed v2: `input` → `texts`, `dimensions` → `output_dimension`, floats
 * only, and `input_type` (required by Cohere) from the request's extension
 * field, `search_document` by default. `truncate: END`, Cohere's default,
 * said outright: a text longer than the model's context is cut to its start
 * and billed what was kept, whatever Cohere's default becomes.
 */
export function toCohereEmbedBody(request: EmbeddingsRequest, texts: string[], upstreamModel: string): Record<string, unknown> {
  return {
    model: upstreamModel,
    input_type: request.inputType ?? 'search_document',
    texts,
    embedding_types: ['float'],
    truncate: 'END',
    ...(request.dimensions === undefined ? {} : { output_dimension: request.dimensions }),
  };
}

/** `{embeddings:{float:[[…]]}, meta:{billed_units:{input_tokens}}}` → vectors and tokens (null when Cohere gave no count). */
export function parseCohereEmbed(provider: string, res: JsonResponse, texts: number): { vectors: number[][]; tokens: number | null } {
  if (res.status < 200 || res.status >= 300) throw cohereError(provider, res);
  const body = res.body as { embeddings?: { float?: unknown }; meta?: { billed_units?: { input_tokens?: unknown } } } | null;
  const vectors = body?.embeddings?.float;
  if (!Array.isArray(vectors) || vectors.length !== texts || !vectors.every(Array.isArray)) {
    throw new UpstreamError({ kind: 'protocol', provider, message: `${provider} sent no float embeddings for ${texts} texts` });
  }
  const tokens = body?.meta?.billed_units?.input_tokens;
  return { vectors: vectors as number[][], tokens: tokenCount(tokens) };
}
