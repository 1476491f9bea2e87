import { UpstreamError } from '../../errors/upstream-error.js';
import { answeredErrorObject } from '../error-status.js';
import type { JsonResponse } from '../http-client.js';
import { isStreamErrorObject } from '../sse-chunk-stream.js';
import { tokenCount } from '../token-count.js';
import type { EmbeddingsRequest, EmbeddingsResult } from '../types.js';
import { httpError } from './errors.js';

/** OpenAI's `/embeddings` body: floats always (the gateway encodes base64 itself), `dimensions` only when asked. */
export function toUpstreamEmbeddingsBody(request: EmbeddingsRequest, upstreamModel: string, input = request.input): Record<string, unknown> {
  return {
    model: upstreamModel,
    input,
    encoding_format: 'float',
    ...(request.dimensions === undefined ? {} : { dimensions: request.dimensions }),
  };
}

/** An OpenAI-shaped embeddings list → vectors in input order and the provider's token count. */
export function parseEmbeddingsList(provider: string, res: JsonResponse, inputs: number): EmbeddingsResult {
  if (res.status < 200 || res.status >= 300) throw httpError(provider, res);
  const body = res.body as { data?: unknown; usage?: { prompt_tokens?: unknown; total_tokens?: unknown } } | null;
  if (!body || !Array.isArray(body.data)) throw withoutList(provider, body, 'an embeddings answer without a data array');
  const vectors: number[][] = new Array(inputs);
  for (const [position, item] of body.data.entries()) {
    const entry = item as { index?: unknown; embedding?: unknown } | null;
    const index = typeof entry?.index === 'number' ? entry.index : position;
    if (!Array.isArray(entry?.embedding) || index < 0 || index >= inputs) throw protocol(provider, 'an embedding that is not a float list');
    vectors[index] = entry.embedding as number[];
  }
  if (vectors.filter(Boolean).length !== inputs) throw protocol(provider, `${body.data.length} embeddings for ${inputs} inputs`);
  const tokens = body.usage?.prompt_tokens ?? body.usage?.total_tokens;
  return { vectors, promptTokens: tokenCount(tokens) ?? 0 };
}

/**
 * Some providers (Scaleway) ignore `dimensions` and answer full-size
 * vectors: that is a feature the provider lacks, reported as the client's
 * 400 (the request cannot be served as asked), never silently passed on.
 */
export function dimensionsIgnored(provider: string, upstreamModel: string, got: number): UpstreamError {
  return new UpstreamError({
    kind: 'http',
    provider,
    status: 400,
    message: `${provider} does not support 'dimensions' for ${upstreamModel} (it answers ${got}-dimensional vectors only)`,
    param: 'dimensions',
  });
}

/** A 2xx answer without its list: the error object a provider answered in its place (docs/adapters.md), else `what`. */
export function withoutList(provider: string, body: unknown, what: string): UpstreamError {
  const b = body as Record<string, unknown> | null;
  return b !== null && typeof b === 'object' && isStreamErrorObject(b) ? answeredErrorObject(provider, b) : protocol(provider, what);
}

export function protocol(provider: string, what: string): UpstreamError {
  return new UpstreamError({ kind: 'protocol', provider, message: `${provider} sent ${what}` });
}
