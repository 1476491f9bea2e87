import type { JsonResponse } from '../http-client.js';
import { parseEmbeddingsList, toUpstreamEmbeddingsBody } from '../openai-compatible/embeddings.js';
import type { EmbeddingsRequest, EmbeddingsResult } from '../types.js';
import { azureError } from './errors.js';

/** OpenAI's embeddings body; `model` is the deployment (ignored on the dated API, routed on v1). */
export function toAzureEmbeddingsBody(request: EmbeddingsRequest, deployment: string): Record<string, unknown> {
  return toUpstreamEmbeddingsBody(request, deployment);
}

export function parseAzureEmbeddings(provider: string, res: JsonResponse, inputs: number): EmbeddingsResult {
  if (res.status < 200 || res.status >= 300) throw azureError(provider, res);
  return parseEmbeddingsList(provider, res, inputs);
}
