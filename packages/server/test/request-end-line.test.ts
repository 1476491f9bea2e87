import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Simulator, startSimulator } from '@gw/simulator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN, eventually } from './helpers/gateway.js';
import { type GatewayProcess, spawnGateway } from './helpers/process.js';

// A request's end line said its status and time but not who made it nor what it asked: an operator following a
// key's 429s or 502s in the log had to join each reqId to its "incoming request" line and then to the usage records.

let sim: Simulator;
let proc: GatewayProcess;
let dir: string;
let key: string;
let keyId: string;

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  dir = mkdtempSync(join(tmpdir(), 'gw-end-line-'));
  writeFileSync(join(dir, 'gw.json'), JSON.stringify(sim.demoConfig()));
  proc = await spawnGateway({ GW_CONFIG: join(dir, 'gw.json'), GW_DATA_DIR: join(dir, 'data'), GW_ADMIN_TOKEN: ADMIN_TOKEN });
  const made = await fetch(`${proc.url}/admin/v1/keys`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  ({ key, id: keyId } = (await made.json()) as { key: string; id: string });
}, 60_000);

afterAll(async () => {
  if (proc && proc.child.exitCode === null) proc.child.kill('SIGKILL');
  await sim?.close();
  rmSync(dir, { recursive: true, force: true });
});

type EndLine = { res: { statusCode: number; route?: string; keyId?: string; promptTokens?: number }; msg: string };

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

const chat = (authorization: string, stream: boolean, signal?: AbortSignal) =>
  fetch(`${proc.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'mistral/small', messages: [{ role: 'user', content: 'a long story please' }], stream, max_tokens: 40 }),
    ...(signal ? { signal } : {}),
  });

describe("a request's end line in the log", () => {
  it('names its route, the id of its key (never the key), its model and provider, the tokens billed, and its error code, for an answer, a stream its client left, and a refusal', async () => {
    const whole = await chat(`Bearer ${key}`, false);
    expect(whole.status).toBe(200);
    const { usage } = (await whole.json()) as { usage: { prompt_tokens: number; completion_tokens: number } };
    expect((await endLine(whole.headers.get('x-request-id') as string)).res).toEqual({
      statusCode: 200,
      route: '/v1/chat/completions',
      keyId,
      model: 'mistral/small',
      provider: 'scaleway',
      promptTokens: usage.prompt_tokens,
      completionTokens: usage.completion_tokens,
    });

    sim.providers.scaleway?.configure({ chunkGapMs: 30 });
    try {
      const leaving = new AbortController();
      const streamed = await chat(`Bearer ${key}`, true, leaving.signal);
      const reader = (streamed.body as ReadableStream<Uint8Array>).getReader();
      await reader.read();
      leaving.abort();
      expect(await endLine(streamed.headers.get('x-request-id') as string)).toMatchObject({
        res: { statusCode: 499, route: '/v1/chat/completions', keyId },
        msg: expect.stringContaining('the client left'),
      });
      // Its resume is not billed again, and its line names the stream it resumes, with the stream's model and provider.
      const streamId = streamed.headers.get('x-request-id') as string;
      const resumed = await fetch(`${proc.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'last-event-id': `${streamId}:1` },
        body: JSON.stringify({ model: 'mistral/small', messages: [{ role: 'user', content: 'a long story please' }], stream: true, max_tokens: 40 }),
      });
      expect(resumed.status).toBe(200);
      expect(await resumed.text()).toContain('[DONE]');
      expect((await endLine(resumed.headers.get('x-request-id') as string)).res).toEqual({
        statusCode: 200,
        route: '/v1/chat/completions',
        keyId,
        model: 'mistral/small',
        provider: 'scaleway',
        resumes: streamId,
      });
    } finally {
      sim.providers.scaleway?.configure({ chunkGapMs: 0 });
    }

    // No key was found: none is named.
    const refused = await chat('Bearer gw_live_notakey', false);
    expect(refused.status).toBe(401);
    expect((await endLine(refused.headers.get('x-request-id') as string)).res).toEqual({
      statusCode: 401,
      route: '/v1/chat/completions',
      code: 'unauthorized',
    });

    const unknownPath = await fetch(`${proc.url}/no/such/path`);
    expect((await endLine(unknownPath.headers.get('x-request-id') as string)).res).toEqual({ statusCode: 404, route: 'unmatched', code: 'not_found' });
    expect(proc.output()).not.toContain(key);
  });

  it("of a stream answered whole carries the stream's billed tokens, as the usage it was sent says", async () => {
    const streamed = await fetch(`${proc.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'mistral/small',
        messages: [{ role: 'user', content: 'a long story please' }],
        stream: true,
        stream_options: { include_usage: true },
        max_tokens: 40,
      }),
    });
    const text = await streamed.text();
    const usage = text
      .split('\n')
      .filter((l) => l.startsWith('data: {'))
      .map((l) => JSON.parse(l.slice(6)) as { usage?: { prompt_tokens: number; completion_tokens: number } | null })
      .find((c) => c.usage)?.usage;
    expect(usage?.completion_tokens).toBeGreaterThan(0);
    expect((await endLine(streamed.headers.get('x-request-id') as string)).res).toEqual({
      statusCode: 200,
      route: '/v1/chat/completions',
      keyId,
      model: 'mistral/small',
      provider: 'scaleway',
      promptTokens: usage?.prompt_tokens,
      completionTokens: usage?.completion_tokens,
    });
  });

  it('of a repeat answered from its first answer (X-Idempotency-Key) names the model and provider, and no tokens', async () => {
    const keyed = () =>
      fetch(`${proc.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-idempotency-key': 'end-line-repeat' },
        body: JSON.stringify({ model: 'mistral/small', messages: [{ role: 'user', content: 'hi' }] }),
      });
    expect((await keyed()).status).toBe(200);
    const repeat = await keyed();
    expect(repeat.headers.get('idempotent-replayed')).toBe('true');
    expect((await endLine(repeat.headers.get('x-request-id') as string)).res).toEqual({
      statusCode: 200,
      route: '/v1/chat/completions',
      keyId,
      model: 'mistral/small',
      provider: 'scaleway',
    });
  });

  it('of a request refused for its model names the model as it was asked for (a retired one, an unknown one, one of another kind)', async () => {
    const ask = (path: string, body: object) =>
      fetch(`${proc.url}${path}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    const messages = [{ role: 'user', content: 'hi' }];
    const cases: [string, object, number, string, string][] = [
      ['/v1/chat/completions', { model: 'mistral/nemo', messages }, 410, 'model_deprecated', 'mistral/nemo'],
      ['/alt/v1/chat/completions', { model: 'mistral/nemo', messages }, 400, 'model_deprecated', 'mistral/nemo'],
      ['/v1/chat/completions', { model: 'mistral-small', messages }, 404, 'model_not_found', 'mistral-small'],
      ['/v1/embeddings', { model: 'mistral/small', input: ['a'] }, 400, 'validation', 'mistral/small'],
      ['/v1/chat/completions', { model: `x/${'y'.repeat(300)}`, messages }, 400, 'validation', `x/${'y'.repeat(198)}…`],
      ['/v1/chat/completions', { model: key, messages }, 404, 'model_not_found', '[redacted]'],
    ];
    for (const [path, body, status, code, model] of cases) {
      const refused = await ask(path, body);
      expect(refused.status, `${path} ${JSON.stringify(body).slice(0, 80)}`).toBe(status);
      expect((await endLine(refused.headers.get('x-request-id') as string)).res).toEqual({ statusCode: status, route: path, keyId, model, code });
    }
    expect(proc.output()).not.toContain(key);
  });

  it('of a stream its provider broke off names the code its usage record keeps', async () => {
    sim.providers.scaleway?.setFault({ kind: 'error_after_200', afterChunks: 2, times: 1 });
    try {
      const streamed = await chat(`Bearer ${key}`, true);
      expect(await streamed.text()).toContain('"error"');
      expect((await endLine(streamed.headers.get('x-request-id') as string)).res).toMatchObject({
        statusCode: 200,
        keyId,
        provider: 'scaleway',
        code: 'upstream_failed',
      });
    } finally {
      sim.providers.scaleway?.clearFaults();
    }
  });
});
