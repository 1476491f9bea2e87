import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';

// A keyed request whose client left while its answer was going out (a slow reader, a proxy's timeout) was never
// recorded: its answer had been given to the idempotency hooks with the client still there, so it was no longer waiting
// to be recorded as a 499, and the answer never finished for its own record. The provider was paid; the key's spend
// and the usage records said nothing.

let gw: TestGateway;

beforeAll(async () => {
  gw = await startGateway();
}, 30_000);

afterAll(async () => {
  await gw?.close();
});

/** Sends `body` as a keyed request, reads only the first bytes of the answer, then closes the connection. */
function leaveDuringAnswer(path: string, key: string, body: string): Promise<string> {
  const socket = connect(Number(new URL(gw.url).port), '127.0.0.1');
  return new Promise((resolve, reject) => {
    socket.once('data', (first) => {
      socket.pause();
      // The answer is far larger than the connection's buffers: it cannot have gone out whole.
      setTimeout(() => {
        socket.destroy();
        resolve(first.toString());
      }, 200);
    });
    socket.on('error', reject);
    socket.write(
      `POST ${path} HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\n` +
        `X-Idempotency-Key: leave-during-answer\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
  });
}

describe('a keyed request whose client leaves while its answer is going out', () => {
  it('is recorded at its cost', async () => {
    const { id, key } = await gw.createKey();
    // 200 inputs of 3,584 floats: about 7 MB of JSON.
    const input = Array.from({ length: 200 }, (_, i) => `text number ${i}`);
    const head = await leaveDuringAnswer('/v1/embeddings', key, JSON.stringify({ model: 'baai/bge-multilingual-gemma2', input }));
    expect(head).toMatch(/^HTTP\/1\.1 200 /);
    await eventually(async () => {
      const { body } = await gw.admin<{ spent: number }>('GET', `/keys/${id}`);
      expect(body.spent).toBeGreaterThan(0);
    });
  });
});
