import { createServer, type Server, type ServerResponse } from 'node:http';
import { connect, type Socket } from 'node:net';
import { finished } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { LiveFrames } from '../src/streaming/live-frames.js';
import { MemoryStreamStore } from '../src/streaming/memory-stream-store.js';
import { StreamSession } from '../src/streaming/session.js';
import { contentChunk, handFedUpstream } from './helpers/chat-stream.js';

const ID = 'req_0000000000000000000000aa';

/** A session whose upstream chunks are pushed by hand through `sink`, as an upstream's reads would. */
async function handFed() {
  const { upstream, source, sink, aborted } = await handFedUpstream();
  const session = new StreamSession({
    streamId: ID,
    model: 'gw/m',
    upstream,
    source,
    store: new MemoryStreamStore(60),
    graceMs: 50,
    promptTokens: 0,
    choices: 1,
    billedCap: () => 1000,
    promptAtMost: (reported: number) => reported,
    onEnd: () => {},
  });
  return { session, sink, aborted };
}

async function readAll(frames: LiveFrames): Promise<string> {
  let text = '';
  for await (const piece of frames) text += String(piece);
  return text;
}

describe('live SSE frames from a session', () => {
  it('writes each event as it lands, numbered, with usage only when asked for', async () => {
    const { session, sink } = await handFed();
    const withUsage = new LiveFrames(session, 0, true, 60_000, 'a');
    const without = new LiveFrames(session, 0, false, 60_000, 'a');
    sink.chunk(contentChunk('second'));
    sink.chunk({ ...contentChunk(''), choices: [], usage: { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 } });
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
    const frames = new LiveFrames(session, 0, false, 60_000, 'a');
    // The stream asks for data once, then nobody reads.
    frames.read(0);
    const big = 'y'.repeat(4096);
    for (let i = 0; i < 200; i++) sink.chunk(contentChunk(big));
    // 800 KB arrived; the readable took about its high-water mark (16 KB) of it.
    expect(frames.readableLength).toBeLessThan(64 * 1024);
    sink.end(null);
    const text = await readAll(frames);
    expect(text.match(/^id: /gm)?.length).toBe(202);
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
  });

  it('starts after the given event when resuming', async () => {
    const { session, sink } = await handFed();
    sink.chunk(contentChunk('second'));
    sink.chunk(contentChunk('third'));
    sink.end(null);
    const text = await readAll(new LiveFrames(session, 2, false, 60_000, 'a'));
    // Event 4 is the usage chunk, which this client did not ask for.
    expect(text.match(/^id: .*$/gm)).toEqual([`id: ${ID}:3`, `id: ${ID}:5`]);
  });

  it('sends a heartbeat comment after each silence', async () => {
    const { session, sink } = await handFed();
    const frames = new LiveFrames(session, 0, false, 40, 'a');
    const seen: string[] = [];
    frames.on('data', (piece) => seen.push(String(piece)));
    await new Promise((r) => setTimeout(r, 150));
    sink.end(null);
    await new Promise((r) => frames.once('end', r));
    expect(seen.filter((p) => p === ': keep-alive\n\n').length).toBeGreaterThanOrEqual(2);
  });

  it('detaches when the client goes, and the session stops the upstream after its grace period', async () => {
    const { session, aborted } = await handFed();
    const frames = new LiveFrames(session, 0, false, 60_000, 'a');
    frames.resume();
    frames.destroy();
    expect(aborted()).toBe(false);
    await new Promise((r) => setTimeout(r, 150));
    expect(aborted()).toBe(true);
  });

  // Piped: the stream is the response's body (Fastify's send). Owned: it writes the response itself (writeTo).
  describe.each(['piped', 'owned'] as const)('written straight to the response socket, %s', (mode) => {
    /**
     * A real HTTP server sending `frames` as the gateway does: headers set on the response and the stream
     * piped to it, or the head and frames written by the stream. `writes.n` counts its sockets' writes
     * where they reach the system (one syscall each).
     */
    async function serve(frames: () => LiveFrames, delayMs = 0): Promise<{ server: Server; port: number; responses: ServerResponse[]; writes: { n: number } }> {
      const responses: ServerResponse[] = [];
      const writes = { n: 0 };
      const server = createServer(async (_req, res) => {
        responses.push(res);
        // As the gateway waits for the first upstream chunk before it answers.
        if (delayMs > 0) await new Promise((r) => setTimeout(r, delayMs));
        const handle = (res.socket as unknown as { _handle: Record<string, unknown> } | null)?._handle ?? {};
        for (const name of ['writev', 'writeBuffer', 'writeUtf8String', 'writeLatin1String', 'writeAsciiString', 'writeUcs2String']) {
          const original = handle[name];
          if (typeof original !== 'function') continue;
          handle[name] = function (this: unknown, ...args: unknown[]) {
            writes.n++;
            return original.apply(this, args);
          };
        }
        if (mode === 'owned') frames().writeTo(res, 200, { 'content-type': 'text/event-stream' });
        else {
          res.setHeader('content-type', 'text/event-stream');
          const piped = frames().sendThrough(res);
          // As Fastify's send does: a response closed before the stream ended (or already) destroys the stream.
          finished(res, () => {
            if (!piped.readableEnded) piped.destroy();
          });
          piped.pipe(res);
        }
      });
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
      return { server, port: (server.address() as { port: number }).port, responses, writes };
    }

    function request(port: number, version: '1.0' | '1.1'): Socket {
      const socket = connect(port, '127.0.0.1');
      // The server closes after the response, so the client reads to the end of the connection.
      socket.write(`GET / HTTP/${version}\r\nhost: x\r\nconnection: close\r\n\r\n`);
      return socket;
    }

    async function readToEnd(socket: Socket): Promise<string> {
      const parts: Buffer[] = [];
      socket.on('data', (b: Buffer) => parts.push(b));
      socket.resume();
      await new Promise((r) => socket.once('end', r));
      return Buffer.concat(parts).toString('utf8');
    }

    /** The HTTP chunks of a chunked response body, checking every chunk's size line against its bytes. */
    function httpChunks(body: string): string[] {
      const bytes = Buffer.from(body, 'utf8');
      let at = 0;
      const out: string[] = [];
      for (;;) {
        const eol = bytes.indexOf('\r\n', at);
        const size = Number.parseInt(bytes.subarray(at, eol).toString(), 16);
        expect(Number.isNaN(size)).toBe(false);
        if (size === 0) return out;
        out.push(bytes.subarray(eol + 2, eol + 2 + size).toString('utf8'));
        expect(bytes.subarray(eol + 2 + size, eol + 4 + size).toString()).toBe('\r\n');
        at = eol + 4 + size;
      }
    }

    const dechunk = (body: string): string => httpChunks(body).join('');

    it('holds frames in the session while the client does not read, then sends them all, each an exact HTTP chunk', async () => {
      const { session, sink } = await handFed();
      const { server, port, responses } = await serve(() => new LiveFrames(session, 0, false, 60_000, 'a'));
      try {
        const socket = request(port, '1.1');
        socket.pause();
        await new Promise((r) => setTimeout(r, 50));
        // Multi-byte text: a chunk's size counts bytes, not characters.
        const big = 'ü'.repeat(2048);
        for (let i = 0; i < 2000; i++) sink.chunk(contentChunk(`${i}:${big}`));
        await new Promise((r) => setTimeout(r, 50));
        // 8 MB arrived, more than the kernel's buffers take; beyond them, the server's socket holds about its high-water mark.
        const serverSide = responses[0]?.socket;
        expect(serverSide?.writableLength).toBeLessThan((serverSide?.writableHighWaterMark ?? 0) + 32 * 1024);
        sink.end(null);
        const raw = await readToEnd(socket);
        const [head, body] = [raw.slice(0, raw.indexOf('\r\n\r\n')), raw.slice(raw.indexOf('\r\n\r\n') + 4)];
        expect(head).toMatch(/transfer-encoding: chunked/i);
        const text = dechunk(body);
        const numbers = [...text.matchAll(/"content":"(\d+):/g)].map((m) => Number(m[1]));
        expect(numbers).toEqual(Array.from({ length: 2000 }, (_, i) => i));
        expect(text.match(/^id: /gm)?.length).toBe(2002);
        expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
      } finally {
        server.close();
      }
    });

    it('sends the last events and the end of the body in one write, and a stream that came whole in one write altogether', async () => {
      const { session, sink } = await handFed();
      const { server, port, writes } = await serve(() => new LiveFrames(session, 0, true, 60_000, 'a'));
      try {
        const socket = request(port, '1.1');
        await new Promise((r) => setTimeout(r, 50));
        expect(writes.n).toBe(1);
        // The usage chunk and the end, as an upstream's last read brings them.
        sink.chunk({ ...contentChunk(''), choices: [], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } });
        sink.end(null);
        const raw = await readToEnd(socket);
        expect(writes.n).toBe(2);
        const pieces = httpChunks(raw.slice(raw.indexOf('\r\n\r\n') + 4));
        expect(pieces.join('').match(/^id: .*$/gm)).toEqual([`id: ${ID}:1`, `id: ${ID}:2`, `id: ${ID}:3`]);
        expect(pieces.join('').endsWith('data: [DONE]\n\n')).toBe(true);
        // A second client of the same, ended, session gets everything in one write.
        writes.n = 0;
        const again = await readToEnd(request(port, '1.1'));
        expect(writes.n).toBe(1);
        expect(httpChunks(again.slice(again.indexOf('\r\n\r\n') + 4)).join('')).toBe(pieces.join(''));
      } finally {
        server.close();
      }
    });

    it('sends the head with the first events, in one write', async () => {
      const { session, sink } = await handFed();
      const { server, port, writes } = await serve(() => new LiveFrames(session, 0, false, 60_000, 'a'));
      try {
        const socket = request(port, '1.1');
        await new Promise((r) => setTimeout(r, 50));
        expect(writes.n).toBe(1);
        sink.chunk(contentChunk('second'));
        sink.end(null);
        const raw = await readToEnd(socket);
        expect(raw.slice(0, raw.indexOf('\r\n\r\n'))).toMatch(/^HTTP\/1\.1 200 OK\r\n[\s\S]*transfer-encoding: chunked/i);
        const pieces = httpChunks(raw.slice(raw.indexOf('\r\n\r\n') + 4));
        // Event 3, the usage chunk, was not asked for.
        expect(pieces.join('').match(/^id: .*$/gm)).toEqual([`id: ${ID}:1`, `id: ${ID}:2`, `id: ${ID}:4`]);
      } finally {
        server.close();
      }
    });

    it('sends the events of one upstream read in one write, and each later read in its own', async () => {
      const { session, sink } = await handFed();
      const { server, port } = await serve(() => new LiveFrames(session, 0, false, 60_000, 'a'));
      try {
        const socket = request(port, '1.1');
        await new Promise((r) => setTimeout(r, 50));
        // Three chunks decoded from one read, then one from the next read.
        for (const text of ['a', 'b', 'c']) sink.chunk(contentChunk(text));
        await new Promise((r) => setTimeout(r, 20));
        sink.chunk(contentChunk('d'));
        await new Promise((r) => setTimeout(r, 20));
        sink.end(null);
        const raw = await readToEnd(socket);
        const pieces = httpChunks(raw.slice(raw.indexOf('\r\n\r\n') + 4)).map((p) => (p.match(/^id: .*$/gm) ?? []).map((l) => l.slice(l.lastIndexOf(':') + 1)));
        expect(pieces).toEqual([['1'], ['2', '3', '4'], ['5'], ['7']]);
      } finally {
        server.close();
      }
    });

    it('writes the body unframed to an HTTP/1.0 client, and ends it by closing', async () => {
      const { session, sink } = await handFed();
      const { server, port } = await serve(() => new LiveFrames(session, 0, false, 60_000, 'a'));
      try {
        const socket = request(port, '1.0');
        await new Promise((r) => setTimeout(r, 50));
        sink.chunk(contentChunk('second'));
        sink.end(null);
        const raw = await readToEnd(socket);
        const body = raw.slice(raw.indexOf('\r\n\r\n') + 4);
        expect(body.startsWith(`id: ${ID}:1\n`)).toBe(true);
        expect(body.match(/^id: .*$/gm)).toEqual([`id: ${ID}:1`, `id: ${ID}:2`, `id: ${ID}:4`]);
        expect(body.endsWith('data: [DONE]\n\n')).toBe(true);
      } finally {
        server.close();
      }
    });

    it('detaches when the client leaves mid-stream, and the session stops the upstream after its grace period', async () => {
      const { session, sink, aborted } = await handFed();
      const { server, port } = await serve(() => new LiveFrames(session, 0, false, 60_000, 'a'));
      try {
        const socket = request(port, '1.1');
        const head = await new Promise<string>((r) => socket.once('data', (b: Buffer) => r(b.toString('utf8'))));
        expect(head).toMatch(/^HTTP\/1\.1 200 OK\r\n[\s\S]*content-type: text\/event-stream/i);
        socket.destroy();
        await new Promise((r) => setTimeout(r, 30));
        sink.chunk(contentChunk('nobody reads this'));
        expect(aborted()).toBe(false);
        await new Promise((r) => setTimeout(r, 150));
        expect(aborted()).toBe(true);
      } finally {
        server.close();
      }
    });

    it('detaches at once when the client left before the answer began', async () => {
      const { session, aborted } = await handFed();
      const { server, port, responses } = await serve(() => new LiveFrames(session, 0, false, 60_000, 'a'), 60);
      try {
        const socket = request(port, '1.1');
        while (responses.length === 0) await new Promise((r) => setTimeout(r, 5));
        socket.destroy();
        // The answer begins (writeTo, or the pipe) after the client left.
        await new Promise((r) => setTimeout(r, 90));
        expect(responses[0]?.destroyed).toBe(true);
        expect(aborted()).toBe(false);
        await new Promise((r) => setTimeout(r, 150));
        expect(aborted()).toBe(true);
      } finally {
        server.close();
      }
    });
  });
});
