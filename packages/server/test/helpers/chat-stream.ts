import { iterateRelay } from '../../src/providers/chunk-relay.js';
import type { ChatChunk, ChatStream, ChunkSink } from '../../src/providers/types.js';

/** An upstream stream (the outside world) from chunks of an async iterable, relayed by pulling them. */
export function chatStreamFromChunks(chunks: AsyncIterable<ChatChunk>, abort: () => void): ChatStream {
  let iterator: AsyncGenerator<ChatChunk> | null = null;
  const stream: ChatStream = {
    abort,
    relay(sink: ChunkSink): void {
      void (async () => {
        try {
          for await (const c of chunks) sink.chunk(c);
          sink.end(null);
        } catch (err) {
          sink.end(err instanceof Error ? err : new Error(String(err)));
        }
      })();
    },
    [Symbol.asyncIterator]: () => {
      iterator ??= iterateRelay(stream);
      return iterator;
    },
  };
  return stream;
}
