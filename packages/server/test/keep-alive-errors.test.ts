import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';

let gw: TestGateway;
let key: string;
let port: number;

beforeAll(async () => {
  gw = await startGateway();
  ({ key } = await gw.createKey({ rateLimitRpm: 1000 }));
  port = Number(new URL(gw.url).port);
});
afterAll(() => gw?.close());

interface Answer {
  status: number;
  head: string;
  body: string;
}

/** One keep-alive connection on which requests are sent one after the other, each answer read whole (Content-Length). */
function connection(): { send(text: string): Promise<Answer>; closed: Promise<void>; socket: Socket } {
  const socket = connect(port, '127.0.0.1');
  let buffer = Buffer.alloc(0);
  let waiting: ((a: Answer) => void) | null = null;
  const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
  socket.on('error', () => {});
  const tryParse = () => {
    const at = buffer.indexOf('\r\n\r\n');
    if (at === -1 || !waiting) return;
    const head = buffer.subarray(0, at).toString('latin1');
    // Content-Length counts bytes (the messages hold multi-byte characters).
    const length = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
    if (buffer.length < at + 4 + length) return;
    const body = buffer.subarray(at + 4, at + 4 + length).toString('utf8');
    buffer = buffer.subarray(at + 4 + length);
    const done = waiting;
    waiting = null;
    done({ status: Number(head.split(' ')[1]), head, body });
  };
  socket.on('data', (d) => {
    buffer = Buffer.concat([buffer, d]);
    tryParse();
  });
  return {
    socket,
    closed,
    send(text) {
      return new Promise((resolve) => {
        waiting = resolve;
        socket.write(text);
      });
    },
  };
}

describe('an error answer to a request without a body keeps the connection open', () => {
  it('a 401 (no key), a 404 (no route) and a 405 (wrong method) leave the connection usable for the next request', async () => {
    const c = connection();
    const unauthorized = await c.send('GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n');
    expect(unauthorized.status).toBe(401);
    expect(unauthorized.head).not.toMatch(/\r\nconnection: close/i);
    expect(JSON.parse(unauthorized.body).error.code).toBe('unauthorized');

    const noRoute = await c.send(`GET /alt/v1/nothing HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\n\r\n`);
    expect(noRoute.status).toBe(404);
    expect(noRoute.head).not.toMatch(/\r\nconnection: close/i);
    expect(JSON.parse(noRoute.body).error).toMatchObject({ code: 'not_found', type: 'invalid_request_error' });

    const wrongMethod = await c.send(`DELETE /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Length: 0\r\n\r\n`);
    expect(wrongMethod.status).toBe(405);
    expect(wrongMethod.head).toMatch(/\r\nallow: GET, HEAD\r\n/i);
    expect(wrongMethod.head).not.toMatch(/\r\nconnection: close/i);

    const ok = await c.send(`GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\n\r\n`);
    expect(ok.status).toBe(200);
    expect(JSON.parse(ok.body).object).toBe('list');
    c.socket.end();
    await c.closed;
  });

  it('a 400 for an empty or invalid JSON body, read to its end, leaves the connection usable', async () => {
    const c = connection();
    const post = `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\n`;
    // No body and no Content-Length (curl -X POST without -d): nothing is left to read.
    const none = await c.send(`${post}\r\n`);
    expect(none.status).toBe(400);
    expect(none.head).not.toMatch(/\r\nconnection: close/i);
    expect(JSON.parse(none.body).error).toMatchObject({ code: 'validation_error', message: 'The request body is empty; send a JSON object.' });
    const empty = await c.send(`${post}Content-Length: 0\r\n\r\n`);
    expect([empty.status, empty.head]).toEqual([400, expect.not.stringMatching(/\r\nconnection: close/i)]);
    const broken = await c.send(`${post}Content-Length: 9\r\n\r\n{"model":`);
    expect([broken.status, broken.head]).toEqual([400, expect.not.stringMatching(/\r\nconnection: close/i)]);
    expect(JSON.parse(broken.body).error.code).toBe('validation_error');
    // B's envelope, the same connection.
    const noneB = await c.send(`${post.replace('/v1/', '/alt/v1/')}\r\n`);
    expect([noneB.status, JSON.parse(noneB.body).error.code]).toEqual([400, 'invalid_request']);
    expect(noneB.head).not.toMatch(/\r\nconnection: close/i);
    // Each says so as every answer on a kept-alive connection does, with the idle timeout (README: 72 s).
    for (const a of [none, empty, broken, noneB]) {
      expect(a.head).toMatch(/\r\nconnection: keep-alive\r\n/i);
      expect(a.head).toMatch(/\r\nkeep-alive: timeout=72(\r\n|$)/i);
    }
    const ok = await c.send(`GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\n\r\n`);
    expect(ok.status).toBe(200);
    c.socket.end();
    await c.closed;
  });

  it('a refusal from the head (401, 415) of a request whose small body came with it keeps the connection: many bad-key requests, then a good one, on one', async () => {
    let connections = 0;
    const count = () => connections++;
    gw.gateway.app.server.on('connection', count);
    try {
      const c = connection();
      const body = JSON.stringify({ model: 'mistral/small', messages: [{ role: 'user', content: 'hi' }] });
      const post = (auth: string, type = 'application/json') =>
        `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${auth}Content-Type: ${type}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
      // No key, a malformed one, one of the right shape the store does not hold, another scheme: each a 401 from the head.
      const refusals = [
        post(''),
        post('Authorization: Bearer abc\r\n'),
        post(`Authorization: Bearer gw_live_${'A'.repeat(43)}\r\n`),
        post(`Authorization: Basic ${Buffer.from(`:${key}`).toString('base64')}\r\n`),
      ];
      for (let round = 0; round < 3; round++) {
        for (const request of refusals) {
          const refused = await c.send(request);
          expect(refused.status).toBe(401);
          expect(refused.head).toMatch(/\r\nconnection: keep-alive\r\n/i);
        }
        const wrongType = await c.send(post(`Authorization: Bearer ${key}\r\n`, 'text/plain'));
        expect([wrongType.status, wrongType.head]).toEqual([415, expect.stringMatching(/\r\nconnection: keep-alive\r\n/i)]);
      }
      const ok = await c.send(post(`Authorization: Bearer ${key}\r\n`));
      expect(ok.status).toBe(200);
      expect(JSON.parse(ok.body).object).toBe('chat.completion');
      expect(connections).toBe(1);
      c.socket.end();
      await c.closed;
    } finally {
      gw.gateway.app.server.off('connection', count);
    }
  });

  it('an answer given before a declared body was read still closes the connection', async () => {
    const c = connection();
    // The 401 is decided from the head; the body (declared, not sent) is not waited for.
    const refused = await c.send('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n');
    expect(refused.status).toBe(401);
    expect(refused.head).toMatch(/\r\nconnection: close/i);
    c.socket.end();
    await c.closed;
  });
});
