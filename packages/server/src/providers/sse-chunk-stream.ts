import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { UpstreamError } from '../errors/upstream-error.js';
import { answers, iterateRelay } from './chunk-relay.js';
import type { UpstreamBody, UpstreamHttp } from './http-client.js';
import { type ChatChunk, type ChatStream, type ChunkSink, UNFINISHED_COUNTED_BYTES } from './types.js';

/** What a decoder returns for the provider's `[DONE]`. */
export const SSE_DONE = Symbol('sse-done');

/**
 * An adapter's reading of one SSE event: the normalised chunks it carries
 * (none, one, or a content chunk and a usage chunk), or SSE_DONE. Throws
 * an UpstreamError for an error event.
 */
export type SseDecoder = ((event: EventSourceMessage) => ChatChunk[] | typeof SSE_DONE) & {
  /** At `[DONE]`: what the decoder still holds back (a `<think>` tag's possible start), as chunks to relay before the end. */
  flush?: () => ChatChunk[];
};

/**
 * An event that reports a failure instead of a chunk: an `error` key (OpenAI), vLLM's and
 * Mistral's `{"object": "error", "message": ...}`, or a bare message or detail with no choices.
 */
export function isStreamErrorObject(raw: Record<string, unknown>): boolean {
  return raw['object'] === 'error' || raw['error'] != null || (!('choices' in raw) && ('message' in raw || 'detail' in raw));
}

/**
 * The most bytes read from a stream without an event ending: what the parser
 * holds of an event not yet complete. A chat chunk is a few hundred bytes, a
 * whole tool call (Mistral's) rarely a megabyte; without a bound, a provider
 * sending one endless line would take the instance's memory.
 */
export const MAX_EVENT_BYTES = 16 * 1024 * 1024;

/** How long the rest of a response after `[DONE]` (normally just its end) is waited for before the connection is let go. */
const AFTER_DONE_MS = 1000;

/**
 * An upstream SSE body relayed by push: each network read is parsed and
 * decoded where it lands and every chunk goes straight to the sink, with
 * no async stage between the socket and the sink (each one cost promises,
 * microtask hops and garbage per chunk).
 *
 * The upstream is read at its own pace, not the client's: the session
 * behind the sink buffers (bounded) and reads to the end whether or not a
 * client is attached.
 */
export function sseChunkStream(http: UpstreamHttp, body: UpstreamBody, decode: SseDecoder): ChatStream {
  let relayed = false;
  let iterator: AsyncGenerator<ChatChunk> | null = null;
  const stream: ChatStream = {
    abort: () => body.destroy(),
    relay(sink: ChunkSink): void {
      if (relayed) throw new Error('an upstream stream is relayed once');
      relayed = true;
      relaySse(http, body, decode, sink);
    },
    [Symbol.asyncIterator]: () => {
      iterator ??= iterateRelay(stream);
      return iterator;
    },
  };
  return stream;
}

/** Data that is empty or only whitespace; a chunk's data opens with `{`, so the common case costs one comparison. */
function noData(data: string): boolean {
  return data.length === 0 || (data.charCodeAt(0) <= 0x20 && data.trim() === '');
}

function relaySse(http: UpstreamHttp, body: UpstreamBody, decode: SseDecoder, sink: ChunkSink): void {
  const provider = http.providerId;
  let finished = false;
  let letGo: NodeJS.Timeout | null = null;
  // Bytes read since a read in which an event ended (so it undercounts by at most one read).
  let sinceEvent = 0;
  // What the sink was last told of an unfinished event (0: nothing, the common case).
  let toldUnfinished = 0;
  // The wait for the answer's first chunk (one that answers(): not the role chunk that opens most streams): bounded by
  // timeoutMs from the answer's headers, whatever comments, empty events or role chunks come meanwhile (each resets
  // undici's read timeout, and the client gets no headers before the answer begins). The timer is armed by a read
  // that does not begin the answer, except the one that brings the opening chunks: the silence after it is bounded by
  // the read timeout, as the silence after the headers is. So a well-formed stream, its role chunk in a read of its
  // own or not, never makes one.
  let answered = false;
  let opening: 'none' | 'read' | 'past' = 'none';
  const opened = performance.now();
  let firstChunkBound: NodeJS.Timeout | null = null;
  const finish = (error: Error | null) => {
    if (finished) return;
    finished = true;
    if (firstChunkBound) clearTimeout(firstChunkBound);
    sink.end(error);
  };
  const parser = createParser({
    onEvent: (event) => {
      sinceEvent = 0;
      if (finished) return;
      // An event with no data (`data:` alone, which some proxies send to keep a connection open) carries nothing: read
      // as a comment is, not as a chunk that is no JSON (the stream failed). An `error` event is the decoder's still.
      if (event.event !== 'error' && noData(event.data)) return;
      let out: ChatChunk[] | typeof SSE_DONE;
      try {
        out = decode(event);
      } catch (err) {
        finish(http.toUpstreamError(err));
        body.destroy();
        return;
      }
      // The bound is on the answer's first chunk, what the client waits for: an event that gives none (Azure's filter
      // results, a keep-alive) or only the role does not end it. [DONE] ends the stream, and the timer with it.
      if (!answered && out !== SSE_DONE) {
        for (const chunk of out) {
          if (answers(chunk)) {
            answered = true;
            if (firstChunkBound) clearTimeout(firstChunkBound);
            break;
          }
          if (opening === 'none') opening = 'read';
        }
      }
      if (out === SSE_DONE) {
        try {
          for (const chunk of decode.flush?.() ?? []) sink.chunk(chunk);
        } catch (err) {
          finish(err instanceof Error ? err : new Error(String(err)));
          body.destroy();
          return;
        }
        finish(null);
        // Reading the response's end keeps its connection for the next request (destroying it would close it).
        letGo = setTimeout(() => body.destroy(), AFTER_DONE_MS);
        letGo.unref();
        return;
      }
      try {
        for (const chunk of out) sink.chunk(chunk);
      } catch (err) {
        // A sink must not throw; if one does, this stream ends rather than the error escaping into the socket's callbacks.
        finish(err instanceof Error ? err : new Error(String(err)));
        body.destroy();
      }
    },
  });
  const decoder = new TextDecoder();
  body.read({
    data: (bytes) => {
      if (finished) return;
      sinceEvent += bytes.length;
      parser.feed(decoder.decode(bytes, { stream: true }));
      if (sinceEvent > UNFINISHED_COUNTED_BYTES && !finished) {
        if (sinceEvent > MAX_EVENT_BYTES) {
          finish(new UpstreamError({ kind: 'protocol', provider, message: `${provider} sent an event larger than ${MAX_EVENT_BYTES / 1024 / 1024} MiB` }));
          body.destroy();
          return;
        }
        // A large unfinished event (an endless line) is memory like the events kept: the instance's bound counts it.
        toldUnfinished = sinceEvent;
        sink.unfinished?.(sinceEvent);
      } else if (toldUnfinished !== 0 && !finished) {
        toldUnfinished = 0;
        sink.unfinished?.(0);
      }
      if (!answered && firstChunkBound === null && !finished) {
        if (opening === 'read') {
          opening = 'past';
          return;
        }
        firstChunkBound = setTimeout(
          () => {
            if (finished) return;
            finish(
              new UpstreamError({ kind: 'timeout', provider, message: `${provider} sent nothing of its answer within ${http.timeoutMs} ms of its headers` }),
            );
            body.destroy();
          },
          Math.max(0, http.timeoutMs - (performance.now() - opened)),
        );
        firstChunkBound.unref();
      }
    },
    // The errors are built only when they end the stream: most streams end at [DONE] first.
    end: () => {
      if (letGo) clearTimeout(letGo);
      if (!finished) parser.feed(decoder.decode());
      if (!finished) finish(new UpstreamError({ kind: 'protocol', provider, message: `${provider} ended the stream before [DONE]` }));
    },
    // Destroyed by us (abort) or failed on the wire: the stream was cut, not completed.
    error: (err) => {
      if (letGo) clearTimeout(letGo);
      if (!finished) finish(http.toUpstreamError(err));
    },
  });
}
