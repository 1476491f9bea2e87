import { createServer, type Server } from 'node:http';
import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LiveFrames } from '../src/streaming/live-frames.js';
import { MemoryStreamStore } from '../src/streaming/memory-stream-store.js';
import { StreamBoundError, type StreamOutcome, StreamSession } from '../src/streaming/session.js';
import { StreamMemory } from '../src/streaming/stream-memory.js';
import type { StreamEvent } from '../src/streaming/types.js';
import { contentChunk, handFedUpstream } from './helpers/chat-stream.js';
import { startGateway, type TestGateway } from './helpers/gateway.js';

const KIB = 1024;
const MIB = 1024 * KIB;

/** A session of `store` counted in `memory`, whose upstream chunks are pushed by hand through `sink`. */
async function handFed(memory: StreamMemory, store: MemoryStreamStore, n: number) {
  const streamId = `req_${n.toString(16).padStart(24, '0')}`;
  const { upstream, source, sink: push, aborted } = await handFedUpstream();
  await store.create(streamId, { keyId: 'k', model: 'm' });
  const ends: StreamOutcome[] = [];
  const session = new StreamSession(
    {
      streamId,
      model: 'gw/m',
      upstream,
      source,
      store,
      graceMs: 60_000,
      promptTokens: 0,
      choices: 1,
      billedCap: () => 1_000_000,
      promptAtMost: (reported: number) => reported,
      onEnd: (o) => ends.push(o),
    },
    memory,
  );
  /** About `bytes` of event data, in 16 KiB chunks. */
  const feed = (bytes: number) => {
    for (let i = 0; i < Math.ceil(bytes / (16 * KIB)); i++) push.chunk(contentChunk('x'.repeat(16 * KIB)));
  };
  return { streamId, session, sink: push, feed, ends, aborted };
}

async function events(store: MemoryStreamStore, streamId: string): Promise<StreamEvent[]> {
  const out: StreamEvent[] = [];
  for await (const e of store.follow(streamId, 0, AbortSignal.timeout(1000))) out.push(e);
  return out;
}

/** A client that asked for its frames once and then never read again. */
function stalled(session: StreamSession): LiveFrames {
  const frames = new LiveFrames(session, 0, false, 60_000, 'a');
  frames.read(0);
  return frames;
}

async function readAll(frames: LiveFrames): Promise<string> {
  let text = '';
  for await (const piece of frames) text += String(piece);
  return text;
}

const tick = () => new Promise((r) => setImmediate(r));

describe('the bound on all streams’ event data', () => {
  it('drops the resume copies of finished streams first, oldest first, and leaves the others resumable', async () => {
    const memory = new StreamMemory(2 * MIB);
    const store = new MemoryStreamStore(60, memory);
    const done = [];
    for (let n = 1; n <= 3; n++) {
      const s = await handFed(memory, store, n);
      s.feed(600 * KIB);
      s.sink.end(null);
      done.push(s);
    }
    await tick();
    // Three finished streams of 600 KiB each, kept for resume.
    expect(memory.bytes).toBeGreaterThan(1800 * KIB);
    const live = await handFed(memory, store, 4);
    const reader = new LiveFrames(live.session, 0, false, 60_000, 'a');
    const read = readAll(reader);
    live.feed(400 * KIB);
    await tick();
    // Over the bound: the copy of the stream that ended first went, and only it.
    expect(await store.meta(done[0]?.streamId as string)).toBeNull();
    expect(await store.meta(done[1]?.streamId as string)).not.toBeNull();
    expect(memory.bytes).toBeLessThanOrEqual(2 * MIB);
    live.feed(500 * KIB);
    await tick();
    expect(await store.meta(done[1]?.streamId as string)).toBeNull();
    expect(await store.meta(done[2]?.streamId as string)).not.toBeNull();
    // The live stream, whose reader keeps up, runs on; the copy left is whole.
    expect(live.session.ended).toBe(false);
    const kept = await events(store, done[2]?.streamId as string);
    expect(kept.at(-1)?.kind).toBe('done');
    expect(kept.map((e) => e.seq)).toEqual(Array.from({ length: kept.length }, (_, i) => i + 1));
    live.sink.end(null);
    expect(await read).toMatch(/data: \[DONE\]\n\n$/);
    for (const s of [...done, live]) expect(s.ends).toHaveLength(1);
    expect(memory.reclaimed).toEqual({ copies: 2, streams: 0 });
  });

  it('then ends the stream whose reader is furthest behind, with an error event, and never one whose reader keeps up', async () => {
    const memory = new StreamMemory(4 * MIB);
    const store = new MemoryStreamStore(60, memory);
    const [slow, slower, fast] = [await handFed(memory, store, 1), await handFed(memory, store, 2), await handFed(memory, store, 3)];
    const slowFrames = stalled(slow.session);
    const slowerFrames = stalled(slower.session);
    const fastRead = readAll(new LiveFrames(fast.session, 0, false, 60_000, 'a'));
    fast.feed(1500 * KIB);
    await tick();
    slow.feed(1 * MIB);
    await tick();
    slower.feed(1500 * KIB);
    await tick();
    expect(memory.reclaimed).toEqual({ copies: 0, streams: 0 });
    fast.feed(200 * KIB);
    await tick();
    // Over the bound: the stream with the most unread went, as the per-stream bound ends one.
    expect(memory.reclaimed).toEqual({ copies: 0, streams: 1 });
    expect(slower.session.ended).toBe(true);
    expect(slower.aborted()).toBe(true);
    expect(slower.ends).toHaveLength(1);
    expect(slower.ends[0]?.error).toBeInstanceOf(StreamBoundError);
    expect(slower.ends[0]?.error?.message).toMatch(/at most 4 MiB of stream events \(GW_STREAM_MEMORY_MB\)/);
    expect(await store.meta(slower.streamId)).toBeNull();
    // Its client gets what it had in hand, then the error (no id: its last event id stays the last event it got).
    const text = await readAll(slowerFrames);
    const last = text.slice(text.lastIndexOf('\n\n', text.length - 3) + 2);
    expect(last).toMatch(/^data: \{"error":\{"message":"The gateway ended this stream: .*"type":"stream_buffer_exceeded","code":"stream_buffer_exceeded"/);
    expect(text).not.toContain('[DONE]');
    expect(text.match(/^id: /gm)?.length ?? 0).toBeLessThan(10);
    expect(memory.bytes).toBeLessThanOrEqual(4 * MIB);
    // The others run on and end whole.
    expect(slow.session.ended).toBe(false);
    expect(fast.session.ended).toBe(false);
    slow.feed(100 * KIB);
    fast.feed(100 * KIB);
    slow.sink.end(null);
    fast.sink.end(null);
    const slowText = await readAll(slowFrames);
    expect(slowText.match(/^id: /gm)?.length).toBe(1 + 64 + 7 + 1);
    expect(slowText).toMatch(/data: \[DONE\]\n\n$/);
    expect(await fastRead).toMatch(/data: \[DONE\]\n\n$/);
    for (const s of [slow, slower, fast]) expect(s.ends).toHaveLength(1);
    expect(slow.ends[0]?.error).toBeNull();
  });

  it('stays over the bound rather than end a stream whose readers keep up', async () => {
    const memory = new StreamMemory(1 * MIB);
    const store = new MemoryStreamStore(60, memory);
    const s = await handFed(memory, store, 1);
    const read = readAll(new LiveFrames(s.session, 0, false, 60_000, 'a'));
    for (let i = 0; i < 20; i++) {
      s.feed(100 * KIB);
      await tick();
    }
    expect(memory.bytes).toBeGreaterThan(1 * MIB);
    expect(s.session.ended).toBe(false);
    s.sink.end(null);
    expect(await read).toMatch(/data: \[DONE\]\n\n$/);
  });

  it('drops the copies of streams that kept up once they end, without waiting for more data', async () => {
    const memory = new StreamMemory(1 * MIB);
    const store = new MemoryStreamStore(60, memory);
    const a = await handFed(memory, store, 1);
    const b = await handFed(memory, store, 2);
    const reads = [a, b].map((s) => readAll(new LiveFrames(s.session, 0, false, 60_000, 'a')));
    for (let i = 0; i < 8; i++) {
      a.feed(100 * KIB);
      b.feed(100 * KIB);
      await tick();
    }
    // Over the bound, and nothing to let go while both run and their readers keep up.
    expect(memory.bytes).toBeGreaterThan(1.5 * MIB);
    a.sink.end(null);
    b.sink.end(null);
    for (const r of reads) expect(await r).toMatch(/data: \[DONE\]\n\n$/);
    await tick();
    // Both finished and read: their copies are what is over the bound, and the older goes at once.
    expect(memory.bytes).toBeLessThanOrEqual(1 * MIB);
    expect(memory.reclaimed.copies).toBe(1);
    expect(await events(store, a.streamId)).toEqual([]);
    expect((await events(store, b.streamId)).at(-1)?.data).toBe('[DONE]');
  });

  it('lowers its threshold as streams that kept up end: a stalled stream is ended near the bound, not near the past peak', async () => {
    const memory = new StreamMemory(1 * MIB);
    // Resume copies not counted (as with Redis): the streams that end leave nothing to drop.
    const store = new MemoryStreamStore(60);
    const long = await handFed(memory, store, 1);
    const k1 = await handFed(memory, store, 2);
    const k2 = await handFed(memory, store, 3);
    const longRead = readAll(new LiveFrames(long.session, 0, false, 60_000, 'a'));
    const kReads = [k1, k2].map((s) => readAll(new LiveFrames(s.session, 0, false, 60_000, 'a')));
    for (let i = 0; i < 15; i++) {
      for (const s of [long, k1, k2]) s.feed(100 * KIB);
      await tick();
    }
    k1.sink.end(null);
    k2.sink.end(null);
    await Promise.all(kReads);
    await tick();
    // What is left over the bound is the long stream, whose reader keeps up (the peak was about three times it).
    expect(memory.bytes).toBeGreaterThan(1 * MIB);
    expect(memory.bytes).toBeLessThan(2 * MIB);
    const s = await handFed(memory, store, 4);
    const frames = stalled(s.session);
    for (let i = 0; i < 15 && s.ends.length === 0; i++) {
      s.feed(100 * KIB);
      long.feed(16 * KIB);
      await tick();
    }
    expect(s.ends).toHaveLength(1);
    expect(s.ends[0]?.error).toBeInstanceOf(StreamBoundError);
    expect(long.session.ended).toBe(false);
    frames.destroy();
    long.sink.end(null);
    expect(await longRead).toMatch(/data: \[DONE\]\n\n$/);
  });
});

// ---- Through the gateway: clients on raw sockets that stop reading. ----

/**
 * An OpenAI-style upstream whose streams are sized by the prompt: `size:<MiB>` sends that many MiB of
 * content in 64 KiB chunks then ends; `hold:<MiB>` sends them and waits until `release()`.
 */
async function bigUpstream() {
  const held: Array<() => void> = [];
  const server: Server = createServer((req, res) => {
    let raw = '';
    req.on('data', (b: Buffer) => {
      raw += b.toString();
    });
    req.on('end', () => {
      if (!req.url?.endsWith('/chat/completions')) {
        // The model list the gateway checks its catalogue against: every upstream name of the demo's llama.
        const data = ['llama-3.3-70b-instruct', 'Meta-Llama-3_3-70B-Instruct', 'meta-llama/Llama-3.3-70B-Instruct'].map((id) => ({ id, object: 'model' }));
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ object: 'list', data }));
        return;
      }
      const body = JSON.parse(raw) as { messages: Array<{ content: string }> };
      const [mode, mib] = (body.messages[0]?.content ?? 'size:1').split(':');
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const piece = 'x'.repeat(64 * KIB);
      const frame = (delta: object | null, usage?: object) =>
        `data: ${JSON.stringify({ id: 'up', object: 'chat.completion.chunk', created: 1, model: 'm', choices: delta ? [{ index: 0, delta }] : [], ...(usage ? { usage } : {}) })}\n\n`;
      let left = Number(mib) * 16;
      const finish = () => {
        if (res.destroyed) return;
        res.end(`${frame(null, { prompt_tokens: 3, completion_tokens: 1000, total_tokens: 1003 })}data: [DONE]\n\n`);
      };
      const more = () => {
        while (left > 0 && !res.destroyed) {
          left--;
          if (!res.write(frame({ content: piece }))) return void res.once('drain', more);
        }
        if (mode === 'hold') held.push(finish);
        else finish();
      };
      more();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    release: () => {
      for (const f of held.splice(0)) f();
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

interface RawStream {
  socket: Socket;
  requestId: Promise<string>;
  /** Reads on until the response ends; the body, its HTTP chunk framing taken off. */
  rest(): Promise<string>;
}

/** A streamed request on a raw socket that stops reading once the response's head arrived. */
function stalledRequest(port: number, key: string, prompt: string): RawStream {
  const body = JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: prompt }], stream: true });
  const socket = connect(port, '127.0.0.1');
  socket.write(
    `POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
  const parts: Buffer[] = [];
  socket.on('data', (b: Buffer) => parts.push(b));
  const requestId = new Promise<string>((resolve) => {
    socket.once('data', (b: Buffer) => {
      socket.pause();
      resolve(/x-request-id: (\S+)/i.exec(b.toString())?.[1] ?? '');
    });
  });
  return {
    socket,
    requestId,
    async rest() {
      const ended = new Promise((r) => socket.once('end', r));
      socket.resume();
      await ended;
      const raw = Buffer.concat(parts);
      return dechunk(raw.subarray(raw.indexOf('\r\n\r\n') + 4));
    },
  };
}

function dechunk(bytes: Buffer): string {
  const out: Buffer[] = [];
  let at = 0;
  for (;;) {
    const eol = bytes.indexOf('\r\n', at);
    const size = Number.parseInt(bytes.subarray(at, eol).toString(), 16);
    if (!(size > 0)) return Buffer.concat(out).toString('utf8');
    out.push(bytes.subarray(eol + 2, eol + 2 + size));
    at = eol + 4 + size;
  }
}

describe('the bound through the gateway (GW_STREAM_MEMORY_MB)', () => {
  let gw: TestGateway;
  let upstream: Awaited<ReturnType<typeof bigUpstream>>;

  beforeAll(async () => {
    upstream = await bigUpstream();
    gw = await startGateway({
      env: { GW_STREAM_MEMORY_MB: '16' },
      catalogue: (c) => ({ ...c, providers: c.providers.map((p) => (p.type === 'openai' ? { ...p, baseUrl: upstream.baseUrl } : p)) }),
    });
  }, 60_000);

  afterAll(async () => {
    await gw?.close();
    await upstream?.close();
  });

  const port = () => Number(new URL(gw.url).port);

  it('drops a finished copy, then ends the stalled stream furthest behind; the others go on, each billed once', async () => {
    const memory = gw.gateway.services.sessions as unknown as { memory: StreamMemory };
    const { key } = await gw.createKey();
    // A stalled client on a stream that sends 6 MiB and waits.
    const a = stalledRequest(port(), key, 'hold:6');
    const aId = await a.requestId;
    await new Promise((r) => setTimeout(r, 300));
    // A client that reads a 4 MiB stream whole; its copy stays for a resume.
    const c = await fetch(`${gw.baseA}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'size:4' }], stream: true }),
    });
    const cId = c.headers.get('x-request-id') as string;
    expect(await c.text()).toMatch(/data: \[DONE\]\n\n$/);
    expect(memory.memory.reclaimed).toEqual({ copies: 0, streams: 0 });
    // A second stalled client on a stream of 14 MiB: past the bound.
    const b = stalledRequest(port(), key, 'size:14');
    const bId = await b.requestId;
    await new Promise((r) => setTimeout(r, 1000));
    expect(memory.memory.reclaimed).toEqual({ copies: 1, streams: 1 });
    // The finished copy went first: its resume is the 404 of a stream let go.
    const resumed = await fetch(`${gw.baseA}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'last-event-id': `${cId}:0` },
      body: JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'size:4' }], stream: true }),
    });
    expect(resumed.status).toBe(404);
    // Then the stream furthest behind (b), with an error event naming the bound; a goes on.
    const bText = await b.rest();
    expect(bText).not.toContain('[DONE]');
    expect(bText.slice(bText.lastIndexOf('data: '))).toMatch(
      /^data: \{"error":\{"message":"The gateway ended this stream: its instance keeps at most 16 MiB of stream events \(GW_STREAM_MEMORY_MB\).*"code":"stream_buffer_exceeded"/,
    );
    upstream.release();
    const aText = await a.rest();
    expect(aText).toMatch(/data: \[DONE\]\n\n$/);
    expect(aText.match(/^id: /gm)?.length).toBe(6 * 16 + 1);
    // One usage record each; b's as a stream cut short.
    await gw.gateway.services.usage.flush();
    const records = await Promise.all([aId, bId, cId].map((id) => gw.gateway.services.store.usage.list({ requestId: id })));
    expect(records.map((r) => r.length)).toEqual([1, 1, 1]);
    expect(records.map((r) => r[0]?.errorCode)).toEqual([null, 'stream_buffer_exceeded', null]);
    expect(memory.memory.bytes).toBeLessThanOrEqual(16 * MIB);
  }, 30_000);
});
