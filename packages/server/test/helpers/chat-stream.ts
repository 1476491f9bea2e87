import { iterateRelay, RelayGate } from '../../src/providers/chunk-relay.js';
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

/** A content chunk as an upstream sends it. */
export function contentChunk(text: string): ChatChunk {
  return { id: 'c', object: 'chat.completion.chunk', created: 1, model: 'up', choices: [{ index: 0, delta: { content: text } }] };
}

/**
 * An upstream whose chunks are pushed by hand through `sink`, as its reads would, with its first chunk
 * ('first') already through the gate: what a session needs to start.
 */
export async function handFedUpstream() {
  let sink: ChunkSink | null = null;
  let aborted = false;
  const upstream = chatStreamFromChunks((async function* () {})(), () => {
    aborted = true;
  });
  upstream.relay = (s) => {
    sink = s;
  };
  const source = new RelayGate(upstream, () => new Error('no first chunk'));
  const push = sink as unknown as ChunkSink;
  push.chunk(contentChunk('first'));
  await source.first;
  return { upstream, source, sink: push, aborted: () => aborted };
}
