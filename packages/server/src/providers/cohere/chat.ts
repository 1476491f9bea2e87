import { UpstreamError } from '../../errors/upstream-error.js';

/** Cohere is configured here for rerank and embeddings only; the catalogue never routes chat to it. */
export function noChat(provider: string): UpstreamError {
  return new UpstreamError({
    kind: 'http',
    provider,
    status: 400,
    message: `${provider} is a Cohere rerank/embed provider on this gateway and serves no chat completions`,
  });
}
