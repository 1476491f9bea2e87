import { describe, expect, it } from 'vitest';
import { RelayGate } from '../src/providers/chunk-relay.js';
import type { ChatChunk, ChunkSink } from '../src/providers/types.js';
import { LiveFrames } from '../src/streaming/live-frames.js';
import { MemoryStreamStore } from '../src/streaming/memory-stream-store.js';
import { StreamSession } from '../src/streaming/session.js';
import { chatStreamFromChunks } from './helpers/chat-stream.js';

const ID = 'req_0000000000000000000000aa';

function content(text: string): ChatChunk {
  return { id: 'c', object: 'chat.completion.chunk', created: 1, model: 'up', choices: [{ index: 0, delta: { content: text } }] };
}

/** A session whose upstream chunks are pushed by hand through `sink`, as an upstream's reads would. */
async function handFed() {
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
  push.chunk(content('first'));
  await source.first;
  const session = new StreamSession({ streamId: ID, model: 'gw/m', upstream, source, store: new MemoryStreamStore(60), graceMs: 50, onEnd: () => {} });
  return { session, sink: push, aborted: () => aborted };
}

async function readAll(frames: LiveFrames): Promise<string> {
  let text = '';
  for await (const piece of frames) text += String(piece);
  return text;
}

describe('live SSE frames from a session', () => {
  it('writes each event as it lands, numbered, with usage only when asked for', async () => {
    const { session, sink } = await handFed();
    const withUsage = new LiveFrames(session, 0, true, 60_000);
    const without = new LiveFrames(session, 0, false, 60_000);
    sink.chunk(content('second'));
    sink.chunk({ ...content(''), choices: [], usage: { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 } });
    sink.end(null);
    const a = await readAll(withUsage);
    const b = await readAll(without);
    expect(a.match(/^id: .*$/gm)).toEqual([`id: ${ID}:1`, `id: ${ID}:2`, `id: ${ID}:3`, `id: ${ID}:4`]);
    expect(a).toContain('"model":"gw/m"');
    expect(a).toContain('"completion_tokens":2');
    expect(a.endsWith('data: [DONE]\n\n')).toBe(true);
    expect(b).not.toContain('completion_tokens');
    expect(b.match(/^id: .*$/gm)).toEqual([`id: ${ID}:1`, `id: ${ID}:2`, `id: ${ID}:4`]);
  });

  it('leaves frames in the session while the client does not read, not in its own buffer', async () => {
    const { session, sink } = await handFed();
    const frames = new LiveFrames(session, 0, false, 60_000);
    // The stream asks for data once, then nobody reads.
    frames.read(0);
    const big = 'y'.repeat(4096);
    for (let i = 0; i < 200; i++) sink.chunk(content(big));
    // 800 KB arrived; the readable took about its high-water mark (16 KB) of it.
    expect(frames.readableLength).toBeLessThan(64 * 1024);
    sink.end(null);
    const text = await readAll(frames);
    expect(text.match(/^id: /gm)?.length).toBe(202);
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
  });

  it('starts after the given event when resuming', async () => {
    const { session, sink } = await handFed();
    sink.chunk(content('second'));
    sink.chunk(content('third'));
    sink.end(null);
    const text = await readAll(new LiveFrames(session, 2, false, 60_000));
    expect(text.match(/^id: .*$/gm)).toEqual([`id: ${ID}:3`, `id: ${ID}:4`]);
  });

  it('sends a heartbeat comment after each silence', async () => {
    const { session, sink } = await handFed();
    const frames = new LiveFrames(session, 0, false, 40);
    const seen: string[] = [];
    frames.on('data', (piece) => seen.push(String(piece)));
    await new Promise((r) => setTimeout(r, 150));
    sink.end(null);
    await new Promise((r) => frames.once('end', r));
    expect(seen.filter((p) => p === ': keep-alive\n\n').length).toBeGreaterThanOrEqual(2);
  });

  it('detaches when the client goes, and the session stops the upstream after its grace period', async () => {
    const { session, aborted } = await handFed();
    const frames = new LiveFrames(session, 0, false, 60_000);
    frames.resume();
    frames.destroy();
    expect(aborted()).toBe(false);
    await new Promise((r) => setTimeout(r, 150));
    expect(aborted()).toBe(true);
  });
});
