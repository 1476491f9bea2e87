import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';
import { readSse, streamRequest } from './helpers/sse.js';

let gw: TestGateway;
let port: number;

beforeAll(async () => {
  gw = await startGateway({ env: { GW_SEND_TIMEOUT_MS: '2000' } });
  port = Number(new URL(gw.url).port);
});
afterAll(() => gw?.close());

/** 2,048 inputs: an answer of about 22 MB, far more than the connection's buffers hold. */
const bigEmbeddings = JSON.stringify({ model: 'mistral/embed', input: Array.from({ length: 2048 }, (_, i) => `word ${i}`) });

function send(key: string): Socket {
  const socket = connect(port, '127.0.0.1');
  socket.on('error', () => {});
  socket.write(
    `POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(bigEmbeddings)}\r\n\r\n${bigEmbeddings}`,
  );
  return socket;
}

/** Reads what the connection gives, about `bytesPerTick` every 100 ms, until the answer is whole or the connection ends. */
function readAnswer(socket: Socket, bytesPerTick: number): Promise<{ whole: boolean; status: string; ms: number }> {
  const started = Date.now();
  const parts: Buffer[] = [];
  let took = 0;
  const whole = () => {
    const buffer = Buffer.concat(parts);
    const at = buffer.indexOf('\r\n\r\n');
    const length = Number(/\r\ncontent-length: *(\d+)/i.exec(buffer.subarray(0, at).toString('latin1'))?.[1] ?? Number.NaN);
    return { whole: at !== -1 && buffer.length >= at + 4 + length, status: buffer.subarray(0, 12).toString('latin1') };
  };
  return new Promise((resolve) => {
    const done = () => {
      clearInterval(tick);
      socket.destroy();
      resolve({ ...whole(), ms: Date.now() - started });
    };
    socket.on('data', (chunk: Buffer) => {
      parts.push(chunk);
      took += chunk.length;
      if (took >= bytesPerTick) socket.pause();
    });
    const tick = setInterval(() => {
      if (whole().whole) return done();
      took = 0;
      socket.resume();
    }, 100);
    socket.once('end', done);
  });
}

describe('an answer the client does not take (GW_SEND_TIMEOUT_MS)', () => {
  it('a client that never reads its answer has its connection closed; the request is recorded with its cost and its budget hold let go', async () => {
    const { id, key } = await gw.createKey({ rateLimitRpm: 1000, budget: 5 });
    const socket = send(key);
    socket.pause();
    // The answer is made (a few hundred ms), then the gateway waits 2 s for progress, checked every 500 ms.
    await eventually(async () => {
      await gw.gateway.services.usage.flush();
      const records = await gw.gateway.services.store.usage.list({ keyId: id });
      expect(records.map((rec) => [rec.status, rec.errorCode, rec.cost > 0])).toEqual([[499, 'client_closed', true]]);
    }, 10_000);
    expect(await gw.gateway.services.ledger.peek(`key:${id}`, `key:${id}`)).toMatchObject({ reserved: 0 });
    // What the client reads now is the start of its answer, then the end of the connection.
    const r = await readAnswer(socket, Number.POSITIVE_INFINITY);
    expect([r.status, r.whole]).toEqual(['HTTP/1.1 200', false]);
  }, 20_000);

  it('a client that reads slowly but steadily gets its whole answer', async () => {
    const { id, key } = await gw.createKey({ rateLimitRpm: 1000 });
    // 400 KB every 100 ms: about 6 s for the answer, three times the timeout, with progress well within each 2 s.
    const r = await readAnswer(send(key), 400 * 1024);
    expect([r.status, r.whole]).toEqual(['HTTP/1.1 200', true]);
    expect(r.ms).toBeGreaterThan(2_000);
    await eventually(async () => {
      await gw.gateway.services.usage.flush();
      const records = await gw.gateway.services.store.usage.list({ keyId: id });
      expect(records.map((rec) => rec.status)).toEqual([200]);
    });
  }, 40_000);

  it('a stream that ended upstream while its client stopped reading is cut too, and stays resumable from where it was', async () => {
    const { id, key } = await gw.createKey({ rateLimitRpm: 1000 });
    // About 19 MB of events: far more than the connection's buffers hold.
    gw.sim.providers.scaleway?.configure({ answerTokens: 100_000 });
    try {
      const body = JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'x' }], stream: true, max_tokens: 100_000 });
      const socket = connect(port, '127.0.0.1');
      socket.on('error', () => {});
      socket.pause();
      socket.write(
        `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nX-Gateway-Provider: scaleway\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
      );
      // The stream ends upstream and is billed; the client takes nothing more, so its connection is closed.
      await eventually(async () => {
        await gw.gateway.services.usage.flush();
        const records = await gw.gateway.services.store.usage.list({ keyId: id });
        expect(records.map((rec) => [rec.status, rec.errorCode])).toEqual([[200, null]]);
        expect(gw.gateway.services.lifecycle.inFlight).toBe(0);
      }, 20_000);
      const parts: Buffer[] = [];
      socket.on('data', (chunk: Buffer) => parts.push(chunk));
      await new Promise((resolve) => socket.once('end', resolve).resume());
      const received = Buffer.concat(parts).toString('latin1');
      expect(received.startsWith('HTTP/1.1 200')).toBe(true);
      expect(received).not.toContain('data: [DONE]');
      // What it did not get is still there to resume.
      const requestId = /x-request-id: (\S+)/i.exec(received)?.[1];
      const events = await readSse(await streamRequest(gw.baseA, key, JSON.parse(body), { 'Last-Event-ID': `${requestId}:0` }));
      expect(events.at(-1)?.data).toBe('[DONE]');
    } finally {
      gw.sim.providers.scaleway?.configure({ answerTokens: null });
    }
  }, 40_000);
});
