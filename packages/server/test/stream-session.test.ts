import { describe, expect, it } from 'vitest';
import { RelayGate } from '../src/providers/chunk-relay.js';
import type { ChatChunk, ChatStream } from '../src/providers/types.js';
import { MemoryStreamStore } from '../src/streaming/memory-stream-store.js';
import { type StreamOutcome, StreamSession } from '../src/streaming/session.js';
import { MAX_STREAM_BYTES } from '../src/streaming/types.js';
import { chatStreamFromChunks } from './helpers/chat-stream.js';

/** An upstream (the outside world) that produces `count` chunks of `size` characters, `gapMs` apart. */
function upstream(count: number, size: number, gapMs = 0): ChatStream & { aborted: boolean; produced: number } {
  const state = { aborted: false, produced: 0 };
  const text = 'x'.repeat(size);
  async function* gen(): AsyncGenerator<ChatChunk> {
    for (let i = 0; i < count; i++) {
      if (state.aborted) throw new Error('aborted');
      if (gapMs > 0) await new Promise((r) => setTimeout(r, gapMs));
      state.produced++;
      yield { id: 'c', object: 'chat.completion.chunk', created: 1, model: 'up', choices: [{ index: 0, delta: { content: text } }] };
    }
  }
  const stream = chatStreamFromChunks(gen(), () => {
    state.aborted = true;
  });
  return Object.defineProperties(stream, { aborted: { get: () => state.aborted }, produced: { get: () => state.produced } }) as ChatStream & typeof state;
}

async function start(up: ReturnType<typeof upstream>, graceMs: number) {
  const source = new RelayGate(up, () => new Error('no first chunk'));
  await source.first;
  let outcome: StreamOutcome | null = null;
  const store = new MemoryStreamStore(60);
  await store.create('req_000000000000000000000001', { keyId: 'k', model: 'm' });
  const session = new StreamSession({
    streamId: 'req_000000000000000000000001',
    model: 'gw/model',
    upstream: up,
    source,
    store,
    graceMs,
    promptTokens: 7,
    choices: 1,
    billedCap: () => 1000,
    promptAtMost: (reported: number) => reported,
    onEnd: (o) => {
      outcome = o;
    },
  });
  return { session, store, outcome: () => outcome };
}

describe('a relayed stream', () => {
  it('reads the upstream at its own pace while a reader is slow, and the reader still gets every event in order', async () => {
    const up = upstream(50, 10, 1);
    const { session } = await start(up, 10_000);
    const seen: number[] = [];
    for await (const e of session.follow(0)) {
      seen.push(e.seq);
      if (seen.length === 5) {
        await new Promise((r) => setTimeout(r, 300));
        // The upstream was not held back by the slow reader.
        expect(up.produced).toBe(50);
      }
    }
    // 50 chunks, the usage chunk, [DONE].
    expect(seen).toEqual(Array.from({ length: 52 }, (_, i) => i + 1));
  });

  it('sends one usage chunk, the last count, just before [DONE] when the provider put usage on every chunk', async () => {
    async function* gen(): AsyncGenerator<ChatChunk> {
      for (let i = 1; i <= 3; i++) {
        yield { id: 'c', object: 'chat.completion.chunk', created: 1, model: 'up', choices: [{ index: 0, delta: { content: 'ab' } }], usage: null };
        yield {
          id: 'c',
          object: 'chat.completion.chunk',
          created: 1,
          model: 'up',
          choices: [],
          usage: { prompt_tokens: 5, completion_tokens: i, total_tokens: 5 + i },
        };
      }
    }
    const { session, outcome } = await start(chatStreamFromChunks(gen(), () => {}) as Parameters<typeof start>[0], 10_000);
    await session.finished;
    const events = [];
    for await (const e of session.follow(0)) events.push(e);
    expect(events.map((e) => e.kind)).toEqual(['chunk', 'chunk', 'chunk', 'usage', 'done']);
    expect(JSON.parse(events[3]?.data ?? '')).toMatchObject({
      model: 'gw/model',
      choices: [],
      usage: { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 },
    });
    expect(outcome()?.usage).toEqual({ prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 });
  });

  it('sends the counts it bills at as the usage chunk when the provider reported none', async () => {
    const up = upstream(3, 10);
    const { session, outcome } = await start(up, 10_000);
    await session.finished;
    const events = [];
    for await (const e of session.follow(0)) events.push(e);
    expect(events.map((e) => e.kind)).toEqual(['chunk', 'chunk', 'chunk', 'usage', 'done']);
    // 30 characters relayed: 8 tokens at about 4 characters each; the prompt as the gateway counted it.
    expect(JSON.parse(events[3]?.data ?? '')).toMatchObject({ id: 'c', choices: [], usage: { prompt_tokens: 7, completion_tokens: 8, total_tokens: 15 } });
    expect(outcome()?.usage).toBeNull();
  });

  it('stops a stream that outgrows the bounded buffer, with an error event', async () => {
    const size = 64 * 1024;
    const up = upstream(Math.ceil(MAX_STREAM_BYTES / size) + 50, size);
    const { session, outcome } = await start(up, 10_000);
    await session.finished;
    expect(outcome()?.error?.message).toMatch(/at most 32 MiB of one stream's events/);
    expect(up.produced).toBeLessThan(Math.ceil(MAX_STREAM_BYTES / size) + 50);
    const events = [];
    for await (const e of session.follow(0)) events.push(e);
    expect(events.at(-1)?.kind).toBe('error');
    expect(JSON.parse(events.at(-1)?.data ?? '')).toMatchObject({ code: 'stream_buffer_exceeded' });
  });

  it('aborts the upstream once the last reader has been gone for the grace period', async () => {
    const up = upstream(1000, 10, 5);
    const { session, outcome } = await start(up, 100);
    for await (const e of session.follow(0)) if (e.seq === 3) break;
    await session.finished;
    expect(up.aborted).toBe(true);
    expect(outcome()?.abandoned).toBe(true);
    expect(up.produced).toBeLessThan(200);
  });
});
