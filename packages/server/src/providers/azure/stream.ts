import type { UpstreamHttp } from '../http-client.js';
import { openAiChunkStream } from '../openai-compatible/stream.js';
import type { ChatChunk, ChatStream } from '../types.js';
import { withoutFilterResults } from './chat.js';

/**
 * Azure's stream is OpenAI's plus content filtering: a first chunk with
 * `choices: []` and only `prompt_filter_results` (id "" and created 0),
 * per-choice `content_filter_results`, and with asynchronous filtering
 * annotation-only choices that have no `delta`. Those are dropped, so
 * an empty-choices chunk is always the usage chunk.
 */
export function azureChunkStream(http: UpstreamHttp, body: AsyncIterable<Uint8Array> & { destroy(): void }): ChatStream {
  const inner = openAiChunkStream(http, body);
  async function* chunks(): AsyncGenerator<ChatChunk> {
    for await (const chunk of inner) {
      const kept = filterChunk(chunk);
      if (kept) yield kept;
    }
  }
  const iterator = chunks();
  return { [Symbol.asyncIterator]: () => iterator, abort: () => inner.abort() };
}

export function filterChunk(chunk: ChatChunk): ChatChunk | null {
  const { prompt_filter_results: _p, ...rest } = chunk;
  const choices = chunk.choices.filter((c) => c && typeof c === 'object' && 'delta' in c).map(withoutFilterResults);
  if (choices.length === 0 && !chunk.usage) return null;
  return { ...rest, choices } as ChatChunk;
}
