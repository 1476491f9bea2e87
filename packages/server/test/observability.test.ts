import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Simulator, startSimulator } from '@gw/simulator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN, eventually } from './helpers/gateway.js';
import { type GatewayProcess, spawnGateway } from './helpers/process.js';

// Every answer the gateway gives, however early, is in /metrics and in the log once, under the id its client got.

let sim: Simulator;
let proc: GatewayProcess;
let dir: string;
let port: number;
let key: string;

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  dir = mkdtempSync(join(tmpdir(), 'gw-obs-'));
  writeFileSync(join(dir, 'gw.json'), JSON.stringify(sim.demoConfig()));
  proc = await spawnGateway({ GW_CONFIG: join(dir, 'gw.json'), GW_DATA_DIR: join(dir, 'data'), GW_ADMIN_TOKEN: ADMIN_TOKEN, GW_REQUEST_TIMEOUT_MS: '1000' });
  port = Number(new URL(proc.url).port);
  key = /gw_live_[A-Za-z0-9_-]{43}/.exec(proc.output())?.[0] as string;
}, 60_000);

afterAll(async () => {
  if (proc && proc.child.exitCode === null) proc.child.kill('SIGKILL');
  await sim?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Writes `text` on a fresh connection (then `drip` every 200 ms, if given) and reads until the gateway closes it. */
function raw(text: string, drip?: string): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    let out = '';
    const timer = drip ? setInterval(() => socket.writable && socket.write(drip), 200) : null;
    socket.on('data', (d) => {
      out += String(d);
    });
    socket.on('error', () => {});
    socket.on('close', () => {
      if (timer) clearInterval(timer);
      resolve(out);
    });
    socket.write(text);
    if (!drip) setTimeout(() => socket.end(), 300);
  });
}

async function count(route: string, variant: string, status: number): Promise<number> {
  const text = await (await fetch(`${proc.url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`gw_http_requests_total{route="${route}",variant="${variant}",status="${status}"}`));
  return Number(line?.split(' ').at(-1) ?? 0);
}

/** The log's lines that end the request `id`. */
function completions(id: string): { res?: { statusCode?: number; code?: string }; msg: string }[] {
  return proc
    .output()
    .split('\n')
    .filter((l) => l.includes(`"reqId":"${id}"`))
    .map((l) => JSON.parse(l) as { res?: { statusCode?: number; code?: string }; msg: string })
    .filter((l) => l.msg.startsWith('request completed'));
}

/** Sends `text`, and checks the answer's status, its count in /metrics (one more) and its one "request completed" line. */
async function answeredOnce(text: string, want: { status: number; route: string; variant: string }, drip?: string): Promise<string> {
  const before = await count(want.route, want.variant, want.status);
  const out = await raw(text, drip);
  expect(out.slice(0, 12)).toBe(`HTTP/1.1 ${want.status}`);
  const id = /\r\nx-request-id: (\S+)/i.exec(out)?.[1] as string;
  expect(id).toMatch(/^req_/);
  await eventually(async () => expect(await count(want.route, want.variant, want.status)).toBe(before + 1));
  await eventually(() => expect(completions(id).map((l) => l.res?.statusCode)).toEqual([want.status]));
  return out;
}

const expectHead = (path: string, auth: string, length: number, type = 'application/json') =>
  `POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${auth}\r\nContent-Type: ${type}\r\nContent-Length: ${length}\r\nExpect: 100-continue\r\n\r\n`;

describe('answers given before the body is asked for (Expect: 100-continue)', () => {
  it('a 401, 413 and 501 are counted under their route and variant and logged with the id the client got', async () => {
    await answeredOnce(expectHead('/v1/chat/completions', 'gw_live_wrong', 100), { status: 401, route: '/v1/chat/completions', variant: 'a' });
    await answeredOnce(expectHead('/alt/v1/chat/completions', 'gw_live_wrong', 100), { status: 401, route: '/alt/v1/chat/completions', variant: 'b' });
    const multipart = 'multipart/form-data; boundary=b';
    const huge = await answeredOnce(expectHead('/alt/v1/audio/transcriptions', key, 30 * 1024 * 1024, multipart), {
      status: 413,
      route: '/alt/v1/audio/transcriptions',
      variant: 'b',
    });
    // Never told to go on, and the connection not kept for a body it did not ask for.
    expect(huge).not.toContain('100 Continue');
    expect(huge).toMatch(/\r\nconnection: close\r\n/i);
    const pending = await answeredOnce(expectHead('/v1/files', key, 5 * 1024 * 1024, multipart), { status: 501, route: '/v1/files', variant: 'a' });
    // As the same 501 without Expect: the SDKs are told a retry cannot help.
    expect(pending).toMatch(/\r\nx-should-retry: false\r\n/i);
  });

  it('a 415 (a body the route refuses as labelled) is counted under its route and variant, logged, and carries the rate-limit headers', async () => {
    const text = await answeredOnce(expectHead('/alt/v1/chat/completions', key, 2_000_000, 'text/plain'), {
      status: 415,
      route: '/alt/v1/chat/completions',
      variant: 'b',
    });
    expect(text).not.toContain('100 Continue');
    expect(text).toMatch(/\r\nx-ratelimit-remaining: \d+\r\n/i);
    await answeredOnce(expectHead('/v1/audio/transcriptions', key, 2_000_000, 'application/json'), {
      status: 415,
      route: '/v1/audio/transcriptions',
      variant: 'a',
    });
  });

  it('an upload of a key whose window is full: its 429 is counted, logged and carries the rate-limit headers', async () => {
    const created = await fetch(`${proc.url}/admin/v1/keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ rateLimitRpm: 1 }),
    });
    const limited = ((await created.json()) as { key: string }).key;
    const first = await fetch(`${proc.url}/v1/models`, { headers: { authorization: `Bearer ${limited}` } });
    expect(first.status).toBe(200);
    // GET /models is not counted: fill the window with a request that is.
    await fetch(`${proc.url}/v1/embeddings`, {
      method: 'POST',
      headers: { authorization: `Bearer ${limited}`, 'content-type': 'application/json' },
      body: '{}',
    });
    const out = await answeredOnce(expectHead('/v1/audio/transcriptions', limited, 5_000_000, 'multipart/form-data; boundary=b'), {
      status: 429,
      route: '/v1/audio/transcriptions',
      variant: 'a',
    });
    expect(out).toMatch(/\r\nx-ratelimit-remaining: 0\r\n/i);
    expect(out).toMatch(/\r\nretry-after: \d+\r\n/i);
  });

  it('a 417 (an expectation other than 100-continue) is counted as unmatched and logged', async () => {
    await answeredOnce(`POST /alt/v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: bogus\r\nContent-Length: 2\r\n\r\n`, {
      status: 417,
      route: 'unmatched',
      variant: 'b',
    });
    // Its log line once threw in the logger's request serializer (no Host on it) and ended the process.
    expect((await fetch(`${proc.url}/healthz`)).status).toBe(200);
    expect(proc.child.exitCode).toBeNull();
  });
});

describe('answers Node asks for before there is a request', () => {
  it('a 431 and a 400 for bad framing are counted as unmatched and logged with the id the client got', async () => {
    await answeredOnce(`GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(40_000)}\r\n\r\n`, { status: 431, route: 'unmatched', variant: 'a' });
    await answeredOnce(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`, {
      status: 400,
      route: 'unmatched',
      variant: 'a',
    });
  });

  it('a 408 for a head not received in time is counted as unmatched and logged', async () => {
    await answeredOnce('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n', { status: 408, route: 'unmatched', variant: 'a' }, 'X-More: y\r\n');
  }, 15_000);

  it('a 408 for a body not received in time says in Server-Timing the seconds it waited', async () => {
    const head = `POST /alt/v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"m`;
    const out = await answeredOnce(head, { status: 408, route: '/alt/v1/chat/completions', variant: 'b' }, ' ');
    const total = Number(/\r\nserver-timing: gw;desc="gateway";dur=[\d.]+, upstream;dur=0\.00, total;dur=([\d.]+)\r\n/i.exec(out)?.[1]);
    // GW_REQUEST_TIMEOUT_MS is 1 s: the request waited at least that long.
    expect(total).toBeGreaterThanOrEqual(1000);
    // Its end line names its code, as any error's does.
    const id = /\r\nx-request-id: (\S+)/i.exec(out)?.[1] as string;
    expect(completions(id)[0]?.res).toMatchObject({ statusCode: 408, code: 'request_timeout' });
  }, 15_000);
});
