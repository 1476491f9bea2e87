import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type Simulator, startSimulator } from '../src/index.js';
import { call, type Json, json, must, parseSse, stream, userMessages } from './helpers.js';

let sim: Simulator;
beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0, only: ['scaleway', 'mistral', 'azure'] });
});
afterAll(() => sim.close());
afterEach(() => sim.reset());
const scw = () => must(sim.providers['scaleway']);
const chat = '/v1/chat/completions';
const model = 'llama-3.3-70b-instruct';
const req = (extra: Record<string, unknown> = {}) => ({ model, messages: userMessages('hello'), ...extra });

describe('status faults', () => {
  it('forces a status with the provider body for the next K requests, then clears', async () => {
    scw().setFault({ kind: 'status', status: 503, times: 2 });
    const a = await json(scw(), chat, req());
    const b = await json(scw(), chat, req());
    const c = await json(scw(), chat, req());
    expect([a.status, b.status, c.status]).toEqual([503, 503, 200]);
    expect(a.body.error.code).toBe(503);
    expect(a.headers.get('retry-after')).toBe('1');
    expect(scw().fault()).toBeNull();
    expect(scw().stats().faultsApplied).toBe(2);
  });

  it('lets `skip` matching requests through before it applies (the second of a batched request’s calls fails)', async () => {
    scw().setFault({ kind: 'status', status: 503, skip: 1, times: 1 });
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) statuses.push((await json(scw(), chat, req())).status);
    expect(statuses).toEqual([200, 503, 200]);
    expect(() => scw().setFault({ kind: 'status', status: 503, skip: -1 })).toThrow('fault.skip');
  });

  it('429 carries Retry-After (seconds or date) and retry-after-ms', async () => {
    scw().setFault({ kind: 'status', status: 429, retryAfter: 7, retryAfterMs: 7000 });
    const r = await json(scw(), chat, req());
    expect(r.status).toBe(429);
    expect(r.headers.get('retry-after')).toBe('7');
    expect(r.headers.get('retry-after-ms')).toBe('7000');
    expect(r.body.error.type).toBe('rate_limit_error');
  });

  it('uses each provider shape: mistral 429 variants, azure 429 without retry-after', async () => {
    const m = must(sim.providers['mistral']);
    m.setFault({ kind: 'status', status: 429, variant: 1 });
    const r = await json(m, chat, { model: 'mistral-small-latest', messages: userMessages('x') });
    expect(r.body).toMatchObject({ object: 'error', type: 'rate_limited', code: '1300', raw_status_code: 429 });
    const az = must(sim.providers['azure']);
    az.setFault({ kind: 'status', status: 429, variant: 1 });
    const a = await json(az, '/openai/deployments/gpt-4o-mini/chat/completions?api-version=2024-10-21', { messages: userMessages('x') });
    expect(a.body.error.code).toBe('429');
    expect(a.headers.get('retry-after')).toBeNull();
    expect(a.headers.get('x-ratelimit-reset-tokens')).toBe('1s');
  });

  it('azure 429 names the fault’s wait in its message and reset header as in Retry-After (they said 1 second whatever it was)', async () => {
    const az = must(sim.providers['azure']);
    const path = '/openai/deployments/gpt-4o-mini/chat/completions?api-version=2024-10-21';
    az.setFault({ kind: 'status', status: 429, retryAfter: 30, times: 1 });
    const a = await json(az, path, { messages: userMessages('x') });
    expect(a.headers.get('retry-after')).toBe('30');
    expect(a.body.error.message).toContain('Please retry after 30 seconds.');
    az.setFault({ kind: 'status', status: 429, variant: 1, retryAfter: new Date(Date.now() + 20_000).toUTCString(), times: 1 });
    const b = await json(az, path, { messages: userMessages('x') });
    expect(b.headers.get('x-ratelimit-reset-tokens')).toMatch(/^(19|20|21)s$/);
    az.setFault({ kind: 'status', status: 429, times: 1 });
    expect((await json(az, path, { messages: userMessages('x') })).body.error.message).toContain('Please retry after 1 second.');
  });

  it('can be scoped to a model and leaves others alone', async () => {
    scw().setFault({ kind: 'status', status: 500, model: 'mistral-small-3.2-24b-instruct-2506' });
    expect((await json(scw(), chat, req())).status).toBe(200);
    expect((await json(scw(), chat, req({ model: 'mistral-small-3.2-24b-instruct-2506' }))).status).toBe(500);
    expect((await json(scw(), '/v1/models')).status).toBe(200);
  });
});

describe('connection faults', () => {
  it('hang: never answers; the client aborts', async () => {
    scw().setFault({ kind: 'hang' });
    const ac = new AbortController();
    const t = setTimeout(() => ac.abort(), 150);
    const started = Date.now();
    await expect(call(scw(), chat, req(), { signal: ac.signal })).rejects.toThrow();
    clearTimeout(t);
    expect(Date.now() - started).toBeGreaterThanOrEqual(140);
    await new Promise((r) => setTimeout(r, 20));
    expect(scw().stats().recent.at(-1)).toMatchObject({ status: 0, fault: 'hang' });
  });

  it('hang after headers: status arrives, the body stalls', async () => {
    scw().setFault({ kind: 'hang', afterChunks: 2 });
    const ac = new AbortController();
    const res = await call(scw(), chat, req({ stream: true }), { signal: ac.signal });
    expect(res.status).toBe(200);
    const reader = must(res.body).getReader();
    let text = '';
    const deadline = Date.now() + 150;
    while (Date.now() < deadline) {
      const next = await Promise.race([reader.read(), new Promise<null>((r) => setTimeout(() => r(null), 50))]);
      if (next === null) continue;
      if (next.done) break;
      text += Buffer.from(next.value).toString();
    }
    ac.abort();
    expect(parseSse(text)).toHaveLength(2);
    expect(text).not.toContain('[DONE]');
  });

  it('reset mid-stream after N chunks', async () => {
    scw().setFault({ kind: 'reset', afterChunks: 3 });
    const res = await call(scw(), chat, req({ stream: true }));
    expect(res.status).toBe(200);
    await expect(res.text()).rejects.toThrow();
  });

  it('reset after the role chunk: with a chunk gap, the role chunk arrives before the connection resets', async () => {
    const mistral = must(sim.providers['mistral']);
    mistral.configure({ chunkGapMs: 40 });
    mistral.setFault({ kind: 'reset', afterChunks: 1 });
    const res = await call(mistral, chat, { model: 'mistral-small-latest', messages: userMessages('hi'), stream: true });
    expect(res.status).toBe(200);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    let text = '';
    const err = await (async () => {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return null;
        text += new TextDecoder().decode(value);
      }
    })().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    // Mistral's opening chunk: the role and empty content, nothing of the answer.
    expect(parseSse(text).map((f) => (JSON.parse(f.data) as { choices: { delta: unknown }[] }).choices[0]?.delta)).toEqual([
      { role: 'assistant', content: '' },
    ]);
  });

  it('truncate ends a stream without [DONE]', async () => {
    scw().setFault({ kind: 'truncate', afterChunks: 2 });
    const s = await stream(scw(), chat, req({ stream: true }));
    expect(s.chunks).toHaveLength(2);
    expect(s.done).toBe(false);
  });

  it('error_after_200 sends the provider error as a data event and no [DONE]', async () => {
    scw().setFault({ kind: 'error_after_200', afterChunks: 1, status: 502 });
    const s = await stream(scw(), chat, req({ stream: true }));
    expect(s.status).toBe(200);
    expect(s.chunks).toHaveLength(2);
    expect(must(s.chunks[1]).error.code).toBe(502);
    expect(s.done).toBe(false);
    expect((await json(scw(), chat, req())).status).toBe(200); // non-stream requests are not affected
  });

  it('latency and slow_first_byte delay the answer', async () => {
    scw().setFault({ kind: 'latency', ms: 120, times: 1 });
    let t0 = Date.now();
    await json(scw(), chat, req());
    expect(Date.now() - t0).toBeGreaterThanOrEqual(110);
    scw().setFault({ kind: 'slow_first_byte', ms: 120, times: 1 });
    t0 = Date.now();
    const res = await call(scw(), chat, req({ stream: true }));
    const headersAt = Date.now() - t0;
    await res.text();
    expect(headersAt).toBeLessThan(100);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(110);
  });
});

describe('control over HTTP, stats and models', () => {
  it('POST /__sim/faults sets and clears; GET /__sim/stats counts per endpoint and model', async () => {
    const set = await fetch(`${scw().url}/__sim/faults`, { method: 'POST', body: JSON.stringify({ kind: 'status', status: 500, times: 1 }) });
    expect(((await set.json()) as { fault: { kind: string } }).fault.kind).toBe('status');
    expect((await json(scw(), chat, req())).status).toBe(500);
    await json(scw(), chat, req());
    await json(scw(), '/v1/embeddings', { model: 'bge-multilingual-gemma2', input: 'x' });
    const stats = (await (await fetch(`${scw().url}/__sim/stats`)).json()) as Json;
    expect(stats.total).toBe(3);
    expect(stats.byEndpoint).toEqual({ chat: 2, embeddings: 1 });
    expect(stats.byModel[model]).toBe(2);
    expect(stats.byStatus).toEqual({ '200': 2, '500': 1 });
    const bad = await fetch(`${scw().url}/__sim/faults`, { method: 'POST', body: JSON.stringify({ kind: 'explode' }) });
    expect(bad.status).toBe(400);
    await fetch(`${scw().url}/__sim/reset`, { method: 'POST' });
    expect(scw().stats().total).toBe(0);
  });

  it('records the last request headers and body', async () => {
    await json(scw(), chat, req({ temperature: 0.2 }), { headers: { 'x-trace': 'abc' } });
    const last = must(scw().stats().last);
    expect(last.headers['authorization']).toBe(`Bearer ${scw().apiKey}`);
    expect(last.headers['x-trace']).toBe('abc');
    expect(last.body).toMatchObject({ model, temperature: 0.2 });
    expect(last).toMatchObject({ endpoint: 'chat', model, status: 200 });
  });

  it('models list follows setModels; removed models are refused', async () => {
    const ids = async () => (await json(scw(), '/v1/models')).body.data.map((d: { id: string }) => d.id) as string[];
    expect(await ids()).toContain(model);
    scw().setModels(
      scw()
        .models()
        .filter((x) => x !== model),
    );
    expect(await ids()).not.toContain(model);
    expect((await json(scw(), chat, req())).status).toBe(422);
    await fetch(`${scw().url}/__sim/models`, { method: 'POST', body: JSON.stringify({ models: [...scw().models(), model] }) });
    expect(await ids()).toContain(model);
    expect((await json(scw(), chat, req())).status).toBe(200);
  });

  it('auth failures are counted and rejected before faults apply', async () => {
    scw().setFault({ kind: 'status', status: 500, times: 1 });
    const r = await json(scw(), chat, req(), { headers: { authorization: 'Bearer client-key' } });
    expect(r.status).toBe(403);
    expect(scw().stats().authFailures).toBe(1);
    expect(must(scw().stats().last).headers['authorization']).toBe('Bearer client-key');
    expect(scw().fault()).not.toBeNull();
  });
});

describe('faults in a whole (non-streaming) body', () => {
  it('afterChunks 0 acts right after the headers: reset, truncate (an empty body), hang', async () => {
    scw().setFault({ kind: 'reset', afterChunks: 0, times: 1 });
    const reset = await call(scw(), chat, req());
    expect(reset.status).toBe(200);
    await expect(reset.text()).rejects.toThrow();
    scw().setFault({ kind: 'truncate', afterChunks: 0, times: 1 });
    const truncated = await call(scw(), chat, req());
    expect(await truncated.text()).toBe('');
    scw().setFault({ kind: 'hang', afterChunks: 0, times: 1 });
    const ac = new AbortController();
    const hung = await call(scw(), chat, req(), { signal: ac.signal });
    const read = hung.text().then(
      () => 'answered',
      () => 'aborted',
    );
    setTimeout(() => ac.abort(), 150);
    expect(await read).toBe('aborted');
  });

  it('stall sends half the body, pauses, then the rest', async () => {
    scw().setFault({ kind: 'stall', afterChunks: 1, ms: 200, times: 1 });
    const started = Date.now();
    const r = await json(scw(), chat, req());
    expect(Date.now() - started).toBeGreaterThanOrEqual(190);
    expect(r.body.choices[0].message.content).toContain('Simulated answer');
  });
});

describe('control input that would misbehave', () => {
  const post = (path: string, body: unknown) => fetch(`${scw().url}${path}`, { method: 'POST', body: JSON.stringify(body) });

  it('a setting of the wrong type is a 400 and changes nothing (a string latency was concatenated: "5000" gave 50 s)', async () => {
    const before = scw().settings();
    for (const bad of [{ latencyMs: '5000' }, { ttftMs: -1 }, { reasoningStyle: 'thoughts' }, { asyncContentFilter: 'yes' }, { answerTokens: 2.5 }]) {
      const r = await post('/__sim/settings', bad);
      expect(r.status, JSON.stringify(bad)).toBe(400);
      expect(((await r.json()) as Json).error).toContain(`settings.${Object.keys(bad)[0]}`);
    }
    expect(scw().settings()).toEqual(before);
    expect(() => scw().configure({ chunkGapMs: Number.NaN })).toThrow('settings.chunkGapMs');
    expect((await post('/__sim/settings', { latencyMs: 0, answerTokens: null })).status).toBe(200);
  });

  it('times 0, a fractional count and a content filter off Azure are refused, where they failed a request or were spent for nothing', async () => {
    for (const bad of [
      { kind: 'status', status: 503, times: 0 },
      { kind: 'reset', afterChunks: 1.5 },
      { kind: 'content_filter', on: 'prompt' },
    ]) {
      const r = await post('/__sim/faults', bad);
      expect(r.status, JSON.stringify(bad)).toBe(400);
    }
    expect(scw().fault()).toBeNull();
    expect((await json(scw(), chat, req())).status).toBe(200);
    must(sim.providers['azure']).setFault({ kind: 'content_filter', on: 'prompt' });
  });
});
