import { connect } from 'node:net';
import { type Simulator, startSimulator } from '@gw/simulator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';

let sim: Simulator;
let gw: TestGateway;

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  gw = await startGateway({ sim });
});
afterAll(async () => {
  await gw?.close().catch(() => {});
  await sim?.close();
});

describe('a draining instance', () => {
  it('answers a request that comes on a connection it already had with 503 in the envelope, Retry-After and connection: close', async () => {
    const { key } = await gw.createKey({ rateLimitRpm: 1000 });
    sim.providers.scaleway?.configure({ chunkGapMs: 100 });
    const port = Number(new URL(gw.url).port);
    const request = (path: string, stream: boolean) => {
      const body = JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'hi' }], stream, max_tokens: 10 });
      return `POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nX-Gateway-Provider: scaleway\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
    };
    const socket = connect(port, '127.0.0.1');
    let out = '';
    socket.on('data', (d) => {
      out += String(d);
    });
    // A stream whose head went out before the drain began (so it keeps the connection open), and a second request
    // sent behind it on that connection once the drain has begun.
    socket.write(request('/v1/chat/completions', true));
    while (!out.includes('data: ')) await new Promise((r) => setTimeout(r, 10));
    const closing = gw.close();
    await new Promise((r) => setTimeout(r, 50));
    socket.write(request('/alt/v1/chat/completions', false));
    await new Promise((r) => socket.on('close', r));
    await closing;
    const at = out.indexOf('HTTP/1.1', 1);
    const [first, second] = [out.slice(0, at), out.slice(at)];
    expect(first).toMatch(/^HTTP\/1\.1 200 /);
    expect(second).toMatch(/^HTTP\/1\.1 503 /);
    expect(second).toMatch(/\r\nretry-after: 1\r\n/i);
    expect(second).toMatch(/\r\nconnection: close\r\n/i);
    const envelope = JSON.parse(second.slice(second.indexOf('{'))) as { error: { code: string; type: string } };
    // The second went to variant B: its envelope.
    expect(envelope.error).toMatchObject({ code: 'service_unavailable', type: 'server_error' });
  });
});
