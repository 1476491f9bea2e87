import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { wav } from './helpers/audio.js';
import { resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';

// An operator reading the usage row of a failed request learns which provider the gateway tried last; a request that
// reached no provider (refused by the rate limiter) names none.

let gw: TestGateway;
let key: string;

beforeAll(async () => {
  gw = await startGateway({
    // Mistral gives up within 300 ms (the timeout case); circuits stay closed, each case is one request's walk.
    catalogue: (c) => ({ ...c, providers: c.providers.map((p) => (p.id === 'mistral' ? { ...p, timeoutMs: 300 } : p)) }),
    env: { GW_CIRCUIT_FAILURES: '1000' },
  });
  key = (await gw.createKey({ rateLimitRpm: 10_000 })).key;
}, 60_000);
afterAll(() => gw?.close());
beforeEach(() => resetProviders(gw.sim));

function post(path: string, body: unknown, headers: Record<string, string> = {}, apiKey = key) {
  return fetch(`${gw.baseA}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
}

async function rowOf(res: Response) {
  await res.arrayBuffer();
  await gw.gateway.services.usage.flush();
  const rows = await gw.gateway.services.store.usage.list({ requestId: res.headers.get('x-request-id') as string });
  expect(rows).toHaveLength(1);
  return rows[0] as NonNullable<(typeof rows)[0]>;
}

const messages = [{ role: 'user', content: 'Which provider was it?' }];

describe('the usage row of a failed request', () => {
  it('chat: names the provider that answered 500', async () => {
    gw.sim.providers.mistral?.setFault({ kind: 'status', status: 500 });
    const res = await post('/chat/completions', { model: 'mistral/medium', messages });
    expect(res.status).toBe(502);
    expect(await rowOf(res)).toMatchObject({ status: 502, errorCode: 'upstream_failed', provider: 'mistral', cost: 0 });
  });

  it('chat: names the provider that timed out', async () => {
    gw.sim.providers.mistral?.setFault({ kind: 'hang' });
    const res = await post('/chat/completions', { model: 'mistral/medium', messages });
    expect(res.status).toBe(504);
    expect(await rowOf(res)).toMatchObject({ status: 504, errorCode: 'upstream_timeout', provider: 'mistral' });
  });

  it('chat: every offer failing names the last one tried', async () => {
    for (const id of ['scaleway', 'ovh', 'nebius']) gw.sim.providers[id]?.setFault({ kind: 'status', status: 503, retryAfter: null });
    const res = await post('/chat/completions', { model: 'meta/llama-3.3-70b', messages });
    expect(res.status).toBe(502);
    const { error } = (await res.clone().json()) as { error: { message: string } };
    const last = error.message
      .match(/tried: ([^)]*)\)/)?.[1]
      ?.split(', ')
      .at(-1);
    expect(last).toMatch(/^(scaleway|ovh|nebius)$/);
    expect(await rowOf(res)).toMatchObject({ status: 502, provider: last });
  });

  it('a stream that failed before its first event names its provider', async () => {
    gw.sim.providers.mistral?.setFault({ kind: 'status', status: 500 });
    const res = await post('/chat/completions', { model: 'mistral/medium', messages, stream: true });
    expect(res.status).toBe(502);
    expect(await rowOf(res)).toMatchObject({ status: 502, streamed: true, provider: 'mistral' });
  });

  it('a stream that failed mid-way names its provider', async () => {
    gw.sim.providers.scaleway?.setFault({ kind: 'error_after_200', afterChunks: 2, status: 500 });
    const res = await post('/chat/completions', { model: 'mistral/small', messages, stream: true }, { 'x-gateway-provider': 'scaleway' });
    expect(res.status).toBe(200);
    expect(await rowOf(res)).toMatchObject({ streamed: true, errorCode: 'upstream_failed', provider: 'scaleway' });
  });

  it('embeddings: names the provider that failed', async () => {
    gw.sim.providers.mistral?.setFault({ kind: 'status', status: 500 });
    const res = await post('/embeddings', { model: 'mistral/embed', input: ['one text'] });
    expect(res.status).toBe(502);
    expect(await rowOf(res)).toMatchObject({ kind: 'embedding', status: 502, provider: 'mistral' });
  });

  it('rerank: names the provider that failed', async () => {
    gw.sim.providers.cohere?.setFault({ kind: 'status', status: 500 });
    const res = await post('/rerank', { model: 'cohere/rerank-v3.5', query: 'q', documents: ['a', 'b'] });
    expect(res.status).toBe(502);
    expect(await rowOf(res)).toMatchObject({ kind: 'rerank', status: 502, provider: 'cohere' });
  });

  it('transcriptions: names the provider that failed', async () => {
    gw.sim.providers.scaleway?.setFault({ kind: 'status', status: 500 });
    const form = new FormData();
    form.set('model', 'openai/whisper-large-v3');
    form.set('file', new Blob([wav(1)], { type: 'audio/wav' }), 'tone.wav');
    const res = await fetch(`${gw.baseA}/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: form });
    expect(res.status).toBe(502);
    expect(await rowOf(res)).toMatchObject({ kind: 'audio', status: 502, provider: 'scaleway' });
  });

  it('a 429 of the rate limiter reached no provider: null', async () => {
    const limited = (await gw.createKey({ rateLimitRpm: 1 })).key;
    expect((await post('/chat/completions', { model: 'mistral/medium', messages }, {}, limited)).status).toBe(200);
    const res = await post('/chat/completions', { model: 'mistral/medium', messages }, {}, limited);
    expect(res.status).toBe(429);
    expect(await rowOf(res)).toMatchObject({ status: 429, provider: null });
  });
});
