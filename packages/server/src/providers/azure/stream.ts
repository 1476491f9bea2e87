import type { UpstreamBody, UpstreamHttp } from '../http-client.js';
import { openAiDecoder } from '../openai-compatible/stream.js';
import { SSE_DONE, type SseDecoder, sseChunkStream } from '../sse-chunk-stream.js';
import type { ChatChunk, ChatStream } from '../types.js';
import { withoutFilterResults } from './chat.js';

/**
 * Azure's stream is OpenAI's plus content filtering: a first chunk with
 * `choices: []` and only `prompt_filter_results` (id "" and created 0),
 * per-choice `content_filter_results`, and with asynchronous filtering
 * annotation-only choices that have no `delta`. Those are dropped, so
 * an empty-choices chunk is always the usage chunk.
 */
export function azureChunkStream(http: UpstreamHttp, body: UpstreamBody): ChatStream {
  const openAi = openAiDecoder(http.providerId);
  const kept = (out: ChatChunk[]): ChatChunk[] => {
    const chunks: ChatChunk[] = [];
    for (const chunk of out) {
      const k = filterChunk(chunk);
      if (k) chunks.push(k);
    }
    return chunks;
  };
  const decode: SseDecoder = (event) => {
    const out = openAi(event);
    return out === SSE_DONE ? out : kept(out);
  };
  decode.flush = () => kept(openAi.flush?.() ?? []);
  return sseChunkStream(http, body, decode);
}

export function filterChunk(chunk: ChatChunk): ChatChunk | null {
  const { prompt_filter_results: _p, ...rest } = chunk;
  const choices = chunk.choices.filter((c) => c && typeof c === 'object' && 'delta' in c).map(withoutFilterResults);
  if (choices.length === 0 && !chunk.usage) return null;
  return { ...rest, choices } as ChatChunk;
}
