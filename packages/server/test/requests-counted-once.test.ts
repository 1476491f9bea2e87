import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';

// Requests Node parsed that were in neither /metrics nor the log: those past the pipelining bound (and the rest of
// their read), a request whose `Expect: 100-continue` checks outlasted its client (its gw_requests_in_flight kept for
// ever, holding a drain to its timeout), and a path with a bad percent-escape (Fastify answers it without the hooks).

let gw: TestGateway;
let key: string;
let port: number;

beforeAll(async () => {
  gw = await startGateway();
  ({ key } = await gw.createKey({ rateLimitRpm: 100_000 }));
  port = Number(new URL(gw.url).port);
});
afterAll(() => gw?.close());

/** Requests counted in gw_http_requests_total (the scrapes themselves left out), and the in-flight gauge. */
async function counted(): Promise<{ total: number; inFlight: number; series: Record<string, number> }> {
  const text = await (await fetch(`${gw.url}/metrics`)).text();
  let total = 0;
  const series: Record<string, number> = {};
  for (const line of text.split('\n')) {
    const m = /^gw_http_requests_total\{(.*)\} (\d+)$/.exec(line);
    if (!m || m[1]?.includes('route="/metrics"')) continue;
    total += Number(m[2]);
    series[m[1] as string] = Number(m[2]);
  }
  return { total, inFlight: Number(/^gw_requests_in_flight (\d+)$/m.exec(text)?.[1]), series };
}

/** On one connection, once open: each string written, each number a wait (ms); then the connection destroyed. */
function connection(steps: (string | number)[]): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    let read = '';
    socket.on('data', (d) => {
      read += d;
    });
    socket.on('error', () => {});
    socket.on('close', () => resolve(read));
    socket.once('connect', async () => {
      for (const step of steps) {
        if (typeof step === 'number') await new Promise((r) => setTimeout(r, step));
        else socket.write(step);
      }
      socket.destroy();
    });
  });
}

/** Sends `steps` and checks that the requests in them are counted `sent` times in all, and none is left in flight. */
async function expectCounted(sent: number, steps: (string | number)[]): Promise<Record<string, number>> {
  const before = await counted();
  await connection(steps);
  await eventually(async () => {
    const now = await counted();
    expect(now.total - before.total).toBe(sent);
    expect(now.inFlight).toBe(before.inFlight);
  });
  // Not more than once: nothing comes later.
  await new Promise((r) => setTimeout(r, 100));
  const after = await counted();
  expect(after.total - before.total).toBe(sent);
  const added: Record<string, number> = {};
  for (const [labels, n] of Object.entries(after.series)) if (n !== (before.series[labels] ?? 0)) added[labels] = n - (before.series[labels] ?? 0);
  return added;
}

const models = () => `GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\n\r\n`;
const upload = (apiKey: string, expectContinue: boolean) =>
  `POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${apiKey}\r\n` +
  `Content-Type: multipart/form-data; boundary=b\r\nContent-Length: 1000000\r\n${expectContinue ? 'Expect: 100-continue\r\n' : ''}\r\n`;
const filePart = `--b\r\nContent-Disposition: form-data; name="model"\r\n\r\nopenai/whisper-large-v3\r\n--b\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\n${'a'.repeat(24_000)}`;

describe('every request Node parsed is counted once', () => {
  it('40 pipelined requests, past the bound of 32 waiting, are each counted, those not started as 499 under unmatched', async () => {
    const added = await expectCounted(40, [models().repeat(40), 200]);
    expect(added['route="unmatched",variant="a",status="499"']).toBe(8);
  });

  it('an upload with Expect: 100-continue whose client left right after its head, while its key was looked up', async () => {
    // A key not looked up yet: its check waits for the database, and the connection has closed by then.
    const fresh = (await gw.createKey()).key;
    const added = await expectCounted(1, [upload(fresh, true)]);
    expect(added).toEqual({ 'route="unmatched",variant="a",status="499"': 1 });
  });

  it('an upload cut after 24 KB of its body, on a connection kept alive from an earlier request', async () => {
    const added = await expectCounted(2, [models(), 50, upload(key, false), filePart, 20]);
    expect(added['route="/v1/audio/transcriptions",variant="a",status="499"']).toBe(1);
  });

  it('a chat completion whose connection is destroyed right after its head', async () => {
    const body = JSON.stringify({ model: 'mistral/small', messages: [{ role: 'user', content: 'hi' }] });
    const head = `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`;
    const added = await expectCounted(1, [head]);
    expect(added).toEqual({ 'route="/v1/chat/completions",variant="a",status="499"': 1 });
  });

  it('a path with a bad percent-escape, answered 400 before any route, and the request pipelined behind it', async () => {
    const added = await expectCounted(2, [`GET /v1/%zz HTTP/1.1\r\nHost: x\r\n\r\n${models()}`, 200]);
    expect(added['route="unmatched",variant="a",status="400"']).toBe(1);
    expect(added['route="/v1/models",variant="a",status="200"']).toBe(1);
  });
});
