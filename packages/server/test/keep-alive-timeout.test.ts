import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';

let gw: TestGateway;
let key: string;
let port: number;

beforeAll(async () => {
  // The headers' and the whole request's bounds (1 s) are shorter than the idle bound: neither may close an idle connection.
  gw = await startGateway({ env: { GW_KEEP_ALIVE_TIMEOUT_MS: '3000', GW_REQUEST_TIMEOUT_MS: '1000' } });
  ({ key } = await gw.createKey({ rateLimitRpm: 1000 }));
  port = Number(new URL(gw.url).port);
});
afterAll(() => gw?.close());

/** A connection on which each request's answer is read whole (Content-Length), and when the gateway closed it. */
function connection(): { send(text: string): Promise<string>; closedAt: Promise<number>; socket: Socket } {
  const socket = connect(port, '127.0.0.1');
  let buffer = Buffer.alloc(0);
  let waiting: ((head: string) => void) | null = null;
  socket.on('error', () => {});
  const closedAt = new Promise<number>((resolve) => socket.on('close', () => resolve(Date.now())));
  socket.on('data', (d) => {
    buffer = Buffer.concat([buffer, d]);
    const at = buffer.indexOf('\r\n\r\n');
    if (at === -1 || !waiting) return;
    const head = buffer.subarray(0, at).toString('latin1');
    // Content-Length counts bytes (the messages hold multi-byte characters).
    const length = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
    if (buffer.length < at + 4 + length) return;
    buffer = buffer.subarray(at + 4 + length);
    const done = waiting;
    waiting = null;
    done(head);
  });
  return {
    socket,
    closedAt,
    send: (text) =>
      new Promise((resolve) => {
        waiting = resolve;
        socket.write(text);
      }),
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('GW_KEEP_ALIVE_TIMEOUT_MS (above the idle timeout of the balancer in front)', () => {
  it('is said in every answer, an error included, and an idle connection stays open that long, however short the request bounds', async () => {
    const c = connection();
    const ok = await c.send(`GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\n\r\n`);
    expect(ok).toMatch(/^HTTP\/1\.1 200 /);
    expect(ok).toMatch(/\r\nkeep-alive: timeout=3(\r\n|$)/i);
    const refused = await c.send('GET /alt/v1/models HTTP/1.1\r\nHost: x\r\n\r\n');
    expect(refused).toMatch(/^HTTP\/1\.1 401 /);
    expect(refused).toMatch(/\r\nkeep-alive: timeout=3(\r\n|$)/i);
    // Idle for longer than the headers' bound (1 s), within the idle one.
    await sleep(2000);
    const again = await c.send(`GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\n\r\n`);
    expect(again).toMatch(/^HTTP\/1\.1 200 /);
    // Then left idle: the gateway closes it once the bound (and Node's 1 s margin past the one it says) has passed.
    const idleFrom = Date.now();
    const closed = await c.closedAt;
    expect(closed - idleFrom).toBeGreaterThanOrEqual(2900);
    expect(closed - idleFrom).toBeLessThan(5000);
  });
});
