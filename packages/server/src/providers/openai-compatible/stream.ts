import { UpstreamError } from '../../errors/upstream-error.js';
import type { UpstreamHttp } from '../http-client.js';
import { upstreamErrorMessage } from '../http-client.js';
import { sseEvents } from '../sse.js';
import type { ChatChunk, ChatStream } from '../types.js';

/**
 * Turns an OpenAI-style SSE body into normalised chunks: vLLM's `reasoning`
 * becomes `reasoning_content`, usage riding on a content chunk is split
 * into its own `choices: []` chunk, an `error` object mid-stream or an end
 * without `[DONE]` throws.
 */
export function openAiChunkStream(http: UpstreamHttp, body: AsyncIterable<Uint8Array> & { destroy(): void }): ChatStream {
  const provider = http.providerId;
  async function* chunks(): AsyncGenerator<ChatChunk> {
    let done = false;
    const events = sseEvents(body);
    try {
      for (let next = await events.next(); !next.done; next = await events.next()) {
        const event = next.value;
        if (event.data === '[DONE]') {
          done = true;
          // The response usually ends just after [DONE]: reading that end in the background keeps
          // the connection for the next request (destroying the body would close it).
          readToEnd(events, body);
          return;
        }
        let parsed: RawChunk;
        try {
          parsed = JSON.parse(event.data) as RawChunk;
        } catch {
          throw new UpstreamError({ kind: 'protocol', provider, message: `${provider} sent an event that is not JSON` });
        }
        if (event.event === 'error' || parsed.error !== undefined) {
          throw new UpstreamError({ kind: 'http', provider, status: 502, message: `${provider} failed mid-stream: ${upstreamErrorMessage(parsed)}` });
        }
        yield* normalise(parsed);
      }
    } catch (err) {
      throw http.toUpstreamError(err);
    } finally {
      if (!done) body.destroy();
    }
    if (!done) throw new UpstreamError({ kind: 'protocol', provider, message: `${provider} ended the stream before [DONE]` });
  }
  const iterator = chunks();
  return {
    [Symbol.asyncIterator]: () => iterator,
    abort: () => body.destroy(),
  };
}

/** Reads what follows [DONE] (normally only the response's end) for at most a second, then lets go of it. */
function readToEnd(events: AsyncGenerator<unknown>, body: { destroy(): void }): void {
  const timer = setTimeout(() => body.destroy(), 1000);
  timer.unref();
  void (async () => {
    try {
      while (!(await events.next()).done) {
        // Anything after [DONE] is ignored.
      }
    } catch {
      // The connection is gone either way.
    } finally {
      clearTimeout(timer);
    }
  })();
}

interface RawChunk {
  id?: unknown;
  created?: unknown;
  model?: unknown;
  choices?: unknown;
  usage?: unknown;
  error?: unknown;
  [extra: string]: unknown;
}

function* normalise(raw: RawChunk): Generator<ChatChunk> {
  const choices = Array.isArray(raw.choices) ? raw.choices.map(renameReasoning) : [];
  const base = {
    ...raw,
    id: typeof raw.id === 'string' ? raw.id : '',
    object: 'chat.completion.chunk' as const,
    created: typeof raw.created === 'number' ? raw.created : Math.floor(Date.now() / 1000),
    model: String(raw.model ?? ''),
  };
  const usage = raw.usage && typeof raw.usage === 'object' ? (raw.usage as ChatChunk['usage']) : null;
  if (usage && choices.length > 0) {
    yield { ...base, choices, usage: null };
    yield { ...base, choices: [], usage };
    return;
  }
  yield { ...base, choices, usage };
}

function renameReasoning(choice: unknown): unknown {
  const c = choice as { delta?: Record<string, unknown> } | null;
  const delta = c?.delta;
  if (!delta || typeof delta['reasoning'] !== 'string' || 'reasoning_content' in delta) return choice;
  const { reasoning, ...rest } = delta;
  return { ...c, delta: { ...rest, reasoning_content: reasoning } };
}
