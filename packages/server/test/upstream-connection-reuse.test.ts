import { createServer as createNetServer, type Server as NetServer, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { UpstreamHttp } from '../src/providers/http-client.js';

interface RawUpstream {
  url: string;
  server: NetServer;
  connections: number;
  /** Called as each request is read, with its number. */
  onReceived: (n: number) => void;
}

/**
 * A keep-alive HTTP/1.1 upstream on a raw socket, so that a test decides every byte it sends:
 * each request is answered with `{"n":<its number>}`, and `extra` may add bytes nobody asked for.
 */
async function rawUpstream(extra: (socket: Socket, n: number) => void = () => {}): Promise<RawUpstream> {
  let count = 0;
  const upstream: RawUpstream = { url: '', server: createNetServer(), connections: 0, onReceived: () => {} };
  upstream.server.on('connection', (socket: Socket) => {
    upstream.connections++;
    let pending = '';
    socket.on('data', (d) => {
      pending += d.toString('latin1');
      for (let end = pending.indexOf('\r\n\r\n'); end >= 0; end = pending.indexOf('\r\n\r\n')) {
        const length = Number(/content-length: *(\d+)/i.exec(pending.slice(0, end))?.[1] ?? 0);
        pending = pending.slice(end + 4 + length);
        const n = ++count;
        upstream.onReceived(n);
        const body = JSON.stringify({ n });
        socket.write(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`);
        extra(socket, n);
      }
    });
  });
  await new Promise<void>((r) => upstream.server.listen(0, '127.0.0.1', r));
  upstream.url = `http://127.0.0.1:${(upstream.server.address() as { port: number }).port}`;
  return upstream;
}

const INJECTED = (() => {
  const body = JSON.stringify({ injected: true });
  return `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`;
})();

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));
const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});

async function clientFor(upstream: RawUpstream): Promise<UpstreamHttp> {
  const http = new UpstreamHttp('raw', upstream.url, 5_000);
  closers.push(async () => {
    await http.close();
    upstream.server.close();
  });
  return http;
}

const call = (http: UpstreamHttp) => http.json({ method: 'POST', path: '/v1/chat/completions', headers: { 'content-type': 'application/json' }, body: '{}' });

describe('a reused upstream connection', () => {
  it('carries a request dispatched in a later turn of the loop at once, not after the next check phase', async () => {
    const upstream = await rawUpstream();
    const http = await clientFor(upstream);
    expect((await call(http)).body).toEqual({ n: 1 });
    await pause(20);
    const order: string[] = [];
    upstream.onReceived = (n) => order.push(`upstream has request ${n}`);
    const second = await new Promise<unknown>((resolve, reject) => {
      // From a timer, as from any callback of a later turn: the write happens within the dispatch,
      // so the upstream (this process) reads it in this turn's poll phase, before its check phase.
      setTimeout(() => {
        call(http).then((r) => resolve(r.body), reject);
        setImmediate(() => order.push('check phase'));
      }, 0);
    });
    expect(second).toEqual({ n: 2 });
    expect(order).toEqual(['upstream has request 2', 'check phase']);
    expect(upstream.connections).toBe(1);
  });

  it.each([
    { when: 'with the answer', inject: (socket: Socket) => socket.write(INJECTED), idleMs: 20 },
    { when: 'while the connection is idle', inject: (socket: Socket) => setTimeout(() => socket.write(INJECTED), 10), idleMs: 40 },
  ])('never hands a response nobody asked for to the next request (sent $when)', async ({ inject, idleMs }) => {
    const upstream = await rawUpstream((socket, n) => {
      if (n === 1) inject(socket);
    });
    const http = await clientFor(upstream);
    expect((await call(http)).body).toEqual({ n: 1 });
    await pause(idleMs);
    expect((await call(http)).body).toEqual({ n: 2 });
    // The connection that carried the injected bytes was dropped.
    expect(upstream.connections).toBe(2);
  });

  it('never hands a response nobody asked for to a request dispatched as the answer ends', async () => {
    const upstream = await rawUpstream((socket, n) => {
      if (n === 1) setImmediate(() => socket.write(INJECTED));
    });
    const http = await clientFor(upstream);
    expect((await call(http)).body).toEqual({ n: 1 });
    // Dispatched in the turn the first answer ended: the connection has not been checked yet.
    expect((await call(http)).body).toEqual({ n: 2 });
  });
});
