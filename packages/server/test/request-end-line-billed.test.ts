import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Simulator, startSimulator } from '@gw/simulator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN, eventually } from './helpers/gateway.js';
import { type GatewayProcess, spawnGateway } from './helpers/process.js';

// A stream's end line named no tokens, whole or left by its client, nor did that of a keyed request whose client left
// before its answer: the line was written as the client left, before the record billed what the request went on to
// use, so an operator adding up a key's spend from the log missed every stream.

let sim: Simulator;
let proc: GatewayProcess;
let dir: string;
let key: string;

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  dir = mkdtempSync(join(tmpdir(), 'gw-end-line-billed-'));
  writeFileSync(join(dir, 'gw.json'), JSON.stringify(sim.demoConfig()));
  proc = await spawnGateway({ GW_CONFIG: join(dir, 'gw.json'), GW_DATA_DIR: join(dir, 'data'), GW_ADMIN_TOKEN: ADMIN_TOKEN });
  const made = await fetch(`${proc.url}/admin/v1/keys`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  ({ key } = (await made.json()) as { key: string });
}, 60_000);

afterAll(async () => {
  if (proc && proc.child.exitCode === null) proc.child.kill('SIGKILL');
  await sim?.close();
  rmSync(dir, { recursive: true, force: true });
});

type EndLine = { res: { statusCode: number; promptTokens?: number; completionTokens?: number }; msg: string };

/** The end line of the request answered with `requestId` (there is exactly one). */
async function endLine(requestId: string): Promise<EndLine> {
  const ends = () =>
    proc
      .output()
      .split('\n')
      .filter((l) => l.includes(`"reqId":"${requestId}"`) && l.includes('"msg":"request completed'))
      .map((l) => JSON.parse(l) as EndLine);
  await eventually(() => expect(ends()).toHaveLength(1));
  return ends()[0] as EndLine;
}

const body = (stream: boolean) =>
  JSON.stringify({ model: 'mistral/small', messages: [{ role: 'user', content: 'a long story please' }], stream, max_tokens: 40 });
const chat = (stream: boolean, headers: Record<string, string> = {}, signal?: AbortSignal) =>
  fetch(`${proc.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
    body: body(stream),
    ...(signal ? { signal } : {}),
  });

describe('the end line of a request that runs on as it is billed', () => {
  it('carries the tokens billed for a whole stream, a stream its client left, and a keyed answer its client left before', async () => {
    const whole = await chat(false);
    const { usage } = (await whole.json()) as { usage: { prompt_tokens: number; completion_tokens: number } };
    const billed = { promptTokens: usage.prompt_tokens, completionTokens: usage.completion_tokens };
    expect((await endLine(whole.headers.get('x-request-id') as string)).res).toMatchObject({ statusCode: 200, ...billed });

    const streamed = await chat(true);
    expect(await streamed.text()).toContain('[DONE]');
    expect((await endLine(streamed.headers.get('x-request-id') as string)).res).toMatchObject({ statusCode: 200, ...billed });

    // The client leaves after the first event: the stream runs on to its end and is billed whole; its line says so then.
    sim.providers.scaleway?.configure({ chunkGapMs: 20 });
    try {
      const leaving = new AbortController();
      const left = await chat(true, {}, leaving.signal);
      await (left.body as ReadableStream<Uint8Array>).getReader().read();
      leaving.abort();
      expect(await endLine(left.headers.get('x-request-id') as string)).toMatchObject({
        res: { statusCode: 499, ...billed },
        msg: 'request completed: the client left during its answer, part of it sent',
      });
    } finally {
      sim.providers.scaleway?.configure({ chunkGapMs: 0 });
    }

    // A keyed request goes on when its client leaves before the answer, and is billed once that is ready.
    sim.providers.scaleway?.setFault({ kind: 'latency', ms: 400, times: 1 });
    const gone = new AbortController();
    let requestId = '';
    const before = proc.output().length;
    const keyed = chat(false, { 'x-idempotency-key': 'end-line-1' }, gone.signal).catch(() => null);
    await eventually(() => {
      const started = /"reqId":"(req_[^"]+)"[^\n]*"incoming request"/.exec(proc.output().slice(before));
      expect(started).not.toBeNull();
      requestId = (started as RegExpExecArray)[1] as string;
    });
    gone.abort();
    await keyed;
    expect(await endLine(requestId)).toMatchObject({ res: { statusCode: 499, ...billed }, msg: 'request completed: the client left before its answer' });

    // A keyed stream whose client left before its first event runs on as well, and is billed when it ends (its events
    // some time apart, so that its answer is sent before it ends).
    sim.providers.scaleway?.setFault({ kind: 'latency', ms: 400, times: 1 });
    sim.providers.scaleway?.configure({ chunkGapMs: 20 });
    const goneStream = new AbortController();
    const mark = proc.output().length;
    const keyedStream = chat(true, { 'x-idempotency-key': 'end-line-3' }, goneStream.signal).catch(() => null);
    await eventually(() => {
      const started = /"reqId":"(req_[^"]+)"[^\n]*"incoming request"/.exec(proc.output().slice(mark));
      expect(started).not.toBeNull();
      requestId = (started as RegExpExecArray)[1] as string;
    });
    goneStream.abort();
    await keyedStream;
    try {
      expect(await endLine(requestId)).toMatchObject({ res: { statusCode: 499, ...billed }, msg: 'request completed: the client left before its answer' });
    } finally {
      sim.providers.scaleway?.configure({ chunkGapMs: 0 });
    }

    // It runs on too when its client is gone before its handler begins (the whole request sent, then the connection
    // closed): its line said nothing of the model and tokens it went on to be billed.
    const sent = body(false);
    const socket = connect(Number(new URL(proc.url).port), '127.0.0.1');
    const head = await new Promise<string>((resolve, reject) => {
      let got = '';
      socket.on('data', (d) => {
        got += d.toString();
      });
      socket.on('close', () => resolve(got));
      socket.on('error', reject);
      socket.end(
        `POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\n` +
          `X-Idempotency-Key: end-line-2\r\nContent-Length: ${Buffer.byteLength(sent)}\r\n\r\n${sent}`,
      );
    });
    expect(head).toBe('');
    const closedEarly = /"reqId":"(req_[^"]+)","req":\{"method":"POST"[^\n]*"incoming request"/g;
    const ids = [...proc.output().matchAll(closedEarly)].map((m) => m[1] as string);
    expect(await endLine(ids[ids.length - 1] as string)).toMatchObject({
      res: { statusCode: 499, model: 'mistral/small', provider: 'scaleway', ...billed },
      msg: 'request completed: the client left before its answer',
    });
  });
});
