import { createHash } from 'node:crypto';
import { type Simulator, startSimulator } from '@gw/simulator';
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { fingerprint, idempotencyScope, type StoredAnswer } from '../src/routing/idempotency.js';
import { wav } from './helpers/audio.js';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';
import { chatBody, classify, post, usageOf } from './helpers/idempotent.js';
import { exchange } from './helpers/raw-http.js';
import { readSse, streamRequest } from './helpers/sse.js';

let sim: Simulator;
let gw: TestGateway;
let impatient: TestGateway;
let key: { id: string; key: string };
let n = 0;
const fresh = () => `idem-${Date.now()}-${++n}`;
const chats = () => sim.providers.scaleway?.stats().byEndpoint.chat ?? 0;

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  // Without Redis: claims and answers live in the store (PGlite here). A claim lives 3 s unless its request's heartbeat
  // (every second) renews it: with 400 ms, a heartbeat held up on a loaded machine let a running claim lapse, and the
  // SDK's retry ran the request a second time. A crashed instance's claim is made below with its own short life.
  gw = await startGateway({ sim, env: { GW_IDEMPOTENCY_CLAIM_TTL_MS: '3000', GW_CIRCUIT_FAILURES: '1000' } });
  // Repeats wait at most 150 ms for the first answer.
  impatient = await startGateway({ sim, env: { GW_IDEMPOTENCY_WAIT_MS: '150' } });
  key = await gw.createKey({ rateLimitRpm: 10_000 });
}, 60_000);
afterAll(async () => {
  await Promise.all([gw?.close(), impatient?.close()]);
  await sim?.close();
});
beforeEach(() => {
  for (const p of Object.values(sim.providers)) {
    p.clearFaults();
    p.resetStats();
    p.configure({ latencyMs: 0, chunkGapMs: 0 });
  }
});

describe('X-Idempotency-Key', () => {
  it('checks the key’s format: 1 to 255 printable ASCII characters, in both variants', async () => {
    for (const bad of ['', 'a'.repeat(256), 'caf\u00e9', 'tab\there']) {
      const a = await post(gw.baseA, key.key, chatBody(), { 'x-idempotency-key': bad });
      expect([a.status, JSON.parse(a.text).error.code, JSON.parse(a.text).error.param], JSON.stringify(bad)).toEqual([
        400,
        'validation_error',
        'X-Idempotency-Key',
      ]);
      const b = await post(gw.baseB, key.key, chatBody(), { 'x-idempotency-key': bad });
      expect([b.status, JSON.parse(b.text).error.code]).toEqual([400, 'invalid_request']);
    }
    expect(chats()).toBe(0);
    expect((await post(gw.baseA, key.key, chatBody(), { 'x-idempotency-key': `~${'k'.repeat(253)} ` })).status).toBe(200);
  });

  it('two X-Idempotency-Key headers are a 400 in both variants (Node would run the request under both joined), with no upstream call', async () => {
    const body = JSON.stringify(chatBody());
    for (const [base, code] of [
      ['/v1', 'validation_error'],
      ['/alt/v1', 'invalid_request'],
    ]) {
      const answer = await exchange(
        Number(new URL(gw.url).port),
        `POST ${base}/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key.key}\r\nContent-Type: application/json\r\n` +
          `X-Idempotency-Key: ${fresh()}\r\nX-Idempotency-Key: ${fresh()}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
      );
      expect(answer).toMatch(/^HTTP\/1\.1 400 /);
      expect(JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)).error).toMatchObject({ code, param: 'X-Idempotency-Key' });
    }
    expect(chats()).toBe(0);
  });

  it('Idempotency-Key (the IETF draft’s name) protects a retry as X-Idempotency-Key does; both at once are a 400', async () => {
    const k = fresh();
    const first = await post(gw.baseB, key.key, chatBody('standard name'), { 'idempotency-key': k });
    expect(first.status).toBe(200);
    // The other name, or the same one again: the stored answer, no second call.
    for (const header of ['idempotency-key', 'x-idempotency-key']) {
      const again = await post(gw.baseB, key.key, chatBody('standard name'), { [header]: k });
      expect([again.status, again.headers.get('idempotent-replayed'), again.text], header).toEqual([200, 'true', first.text]);
    }
    expect(chats()).toBe(1);
    const other = await post(gw.baseA, key.key, chatBody('another body'), { 'idempotency-key': fresh() });
    expect(other.status).toBe(200);
    const both = await post(gw.baseA, key.key, chatBody('both'), { 'idempotency-key': fresh(), 'x-idempotency-key': fresh() });
    expect([both.status, JSON.parse(both.text).error.code, JSON.parse(both.text).error.param]).toEqual([400, 'validation_error', 'X-Idempotency-Key']);
    expect(chats()).toBe(2);
  });

  it('a repeat gets the stored answer with its routing headers, Idempotent-Replayed, no upstream call and no second charge', async () => {
    const own = await gw.createKey({ rateLimitRpm: 100, budget: 10 });
    const client = new OpenAI({ apiKey: own.key, baseURL: gw.baseB, maxRetries: 0 });
    const opts = { headers: { 'X-Idempotency-Key': 'order-42', 'X-Gateway-Strategy': 'cheapest' } };
    const first = await client.chat.completions.create({ ...chatBody(), messages: [{ role: 'user', content: 'Charge me once' }] }, opts).withResponse();
    // Field order does not make a different request (its routing headers are part of it: docs/routing.md).
    const again = await post(gw.baseB, own.key, '{"max_tokens":20,"messages":[{"content":"Charge me once","role":"user"}],"model":"meta/llama-3.3-70b"}', {
      'x-idempotency-key': 'order-42',
      'x-gateway-strategy': 'cheapest',
    });
    expect(again.status).toBe(200);
    expect(JSON.parse(again.text)).toEqual(first.data);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(first.response.headers.get('idempotent-replayed')).toBeNull();
    for (const h of ['x-gateway-provider', 'x-gateway-region', 'x-gateway-strategy', 'x-gateway-routing-hops', 'content-type']) {
      expect(again.headers.get(h), h).toBe(first.response.headers.get(h));
    }
    expect(again.headers.get('x-gateway-strategy')).toBe('cheapest');
    expect(again.headers.get('x-request-id')).not.toBe(first.response.headers.get('x-request-id'));
    const served = first.response.headers.get('x-gateway-provider') as string;
    expect(sim.providers[served]?.stats().byEndpoint.chat).toBe(1);
    const records = await usageOf([gw], own.id);
    expect(records).toHaveLength(1);
    const spent = (await gw.admin<{ spent: number }>('GET', `/keys/${own.id}`)).body.spent;
    expect(spent).toBeCloseTo(records[0]?.cost ?? -1, 12);
  });

  it('the same key with a different body is a 422; keys are per API key', async () => {
    const k = fresh();
    expect((await post(gw.baseA, key.key, chatBody('one'), { 'x-idempotency-key': k })).status).toBe(200);
    const other = await post(gw.baseA, key.key, chatBody('two'), { 'x-idempotency-key': k });
    expect([other.status, JSON.parse(other.text).error.code]).toEqual([422, 'unprocessable_entity']);
    const otherB = await post(gw.baseB, key.key, chatBody('one'), { 'x-idempotency-key': k });
    // Another path (the other variant) is another request, too.
    expect(otherB.status).toBe(422);
    const stranger = await gw.createKey();
    const theirs = await post(gw.baseA, stranger.key, chatBody('one'), { 'x-idempotency-key': k });
    expect(theirs.status).toBe(200);
    expect(theirs.headers.get('idempotent-replayed')).toBeNull();
    expect(chats()).toBe(2);
  });

  it('a large body is the same request in any field order and another with one character changed, long strings with escapes too', async () => {
    const image = `data:image/png;base64,${Buffer.alloc(300_000, 7).toString('base64')}`;
    const text = `${'Ça « va » ?\n'.repeat(3000)}"\\😀`;
    const body = (url: string, order: 'as-sent' | 'reversed') => {
      const parts = [
        { type: 'text', text },
        { type: 'image_url', image_url: { url, detail: 'low' } },
      ];
      const message = { role: 'user', content: parts };
      return order === 'as-sent'
        ? JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [message], max_tokens: 20 })
        : JSON.stringify({
            max_tokens: 20,
            messages: [{ content: parts.map((p) => Object.fromEntries(Object.entries(p).reverse())), role: 'user' }],
            model: 'meta/llama-3.3-70b',
          });
    };
    const k = fresh();
    const first = await post(gw.baseA, key.key, body(image, 'as-sent'), { 'x-idempotency-key': k });
    expect(first.status).toBe(200);
    const again = await post(gw.baseA, key.key, body(image, 'reversed'), { 'x-idempotency-key': k });
    expect([again.status, again.headers.get('idempotent-replayed')]).toEqual([200, 'true']);
    const changed = `${image.slice(0, -5)}B${image.slice(-4)}`;
    expect((await post(gw.baseA, key.key, body(changed, 'as-sent'), { 'x-idempotency-key': k })).status).toBe(422);
    expect(chats()).toBe(1);
  });

  it('the fingerprint is the digest of the canonical JSON as one string, so that keys claimed by an earlier version still match', () => {
    const long = 'x'.repeat(40_000);
    const body = { model: 'm', b: [1, null, { z: long, a: 'é"\n' }], a: undefined };
    const canonical = `{"b":[1,null,{"a":${JSON.stringify('é"\n')},"z":"${long}"}],"model":"m"}`;
    const expected = createHash('sha256').update(`POST /v1/chat/completions\n${canonical}\nupload`).digest('hex');
    expect(fingerprint('POST', '/v1/chat/completions', body, 'upload')).toBe(expected);
    // Lists of numbers (token ids, a vector), written whole, and mixed ones.
    const tokens = { input: [Array.from({ length: 9000 }, (_, i) => i * 31 - 7), [0.5, -0, 1e21, 1.5e-7], [], [1, 'a', 2]], model: 'e' };
    const canonicalTokens = `{"input":[[${tokens.input[0]?.join(',')}],[0.5,0,1e+21,1.5e-7],[],[1,"a",2]],"model":"e"}`;
    expect(fingerprint('POST', '/v1/embeddings', tokens)).toBe(createHash('sha256').update(`POST /v1/embeddings\n${canonicalTokens}\n`).digest('hex'));
  });

  it('stores nothing for a request refused before any upstream call (400, 402, 429) or failed upstream (5xx): the retry runs', async () => {
    const k = fresh();
    const poor = await gw.createKey({ rateLimitRpm: 2, budget: 0 });
    const bad = await post(gw.baseA, poor.key, chatBody(), { 'x-idempotency-key': k, 'x-gateway-max-hops': '9' });
    expect(bad.status).toBe(400);
    const broke = await post(gw.baseA, poor.key, chatBody(), { 'x-idempotency-key': k });
    expect(broke.status).toBe(402);
    await gw.admin('PATCH', `/keys/${poor.id}`, { budget: 10 });
    const limited = await post(gw.baseA, poor.key, chatBody(), { 'x-idempotency-key': k });
    expect(limited.status).toBe(429);
    await gw.admin('PATCH', `/keys/${poor.id}`, { rateLimitRpm: 100 });
    for (const p of ['scaleway', 'ovh', 'nebius']) sim.providers[p]?.setFault({ kind: 'status', status: 503, retryAfter: null, times: 1 });
    const down = await post(gw.baseA, poor.key, chatBody(), { 'x-idempotency-key': k });
    expect([down.status, JSON.parse(down.text).error.code]).toEqual([502, 'provider_down']);
    const ok = await post(gw.baseA, poor.key, chatBody(), { 'x-idempotency-key': k });
    expect(ok.status).toBe(200);
    expect(ok.headers.get('idempotent-replayed')).toBeNull();
    expect((await post(gw.baseA, poor.key, chatBody(), { 'x-idempotency-key': k })).headers.get('idempotent-replayed')).toBe('true');
  });

  it('an answer refused by the provider after the call is stored and replayed too', async () => {
    const k = fresh();
    // The provider refuses this one request as invalid: the gateway answers the client's 400.
    sim.providers.scaleway?.setFault({ kind: 'status', status: 400, message: 'bad input', times: 1 });
    const headers = { 'x-idempotency-key': k, 'x-gateway-provider': 'scaleway' };
    const first = await post(gw.baseB, key.key, chatBody(), headers);
    expect(first.status).toBe(400);
    const again = await post(gw.baseB, key.key, chatBody(), headers);
    expect([again.status, again.text, again.headers.get('idempotent-replayed')]).toEqual([400, first.text, 'true']);
    expect(chats()).toBe(1);
  });

  it('20 concurrent duplicates: one upstream call, one usage record, every duplicate the identical answer', async () => {
    const own = await gw.createKey({ rateLimitRpm: 1000 });
    sim.providers.scaleway?.configure({ latencyMs: 300 });
    const answers = await Promise.all(Array.from({ length: 20 }, () => post(gw.baseA, own.key, chatBody(), { 'x-idempotency-key': 'burst' })));
    const { fresh: first, replays, conflicts, other } = classify(answers);
    expect(other).toEqual([]);
    expect(first).toHaveLength(1);
    expect(replays).toHaveLength(19);
    expect(conflicts).toHaveLength(0);
    for (const r of replays) expect(r.text).toBe(first[0]?.text);
    expect(chats()).toBe(1);
    expect(await usageOf([gw], own.id)).toHaveLength(1);
  });

  it('a keyed request whose client leaves (the SDK timing out and retrying) runs on: the retry replays its answer, one set of upstream calls, billed once', async () => {
    // An embeddings batch Mistral is sent in 5 calls, each paid as it answers, and a chat completion; each slower than the SDK's timeout.
    const chunks = Array.from({ length: 100 }, (_, i) => `chunk ${String(i).padStart(3, '0')} `.padEnd(2000, 'abcd'));
    sim.providers.mistral?.configure({ latencyMs: 250 });
    sim.providers.scaleway?.configure({ latencyMs: 900 });
    sim.providers.cohere?.configure({ latencyMs: 900 });
    type Billed = { usage?: { prompt_tokens: number }; meta?: { billed_units: { search_units: number } } };
    const cases = [
      {
        provider: 'mistral',
        endpoint: 'embeddings',
        calls: 5,
        ask: (c: OpenAI) => c.embeddings.create({ model: 'mistral/embed', input: chunks }).withResponse(),
      },
      { provider: 'scaleway', endpoint: 'chat', calls: 1, ask: (c: OpenAI) => c.chat.completions.create(chatBody('Answer me once')).withResponse() },
      {
        provider: 'cohere',
        endpoint: 'rerank',
        calls: 1,
        ask: (c: OpenAI) =>
          c.post<Billed>('/rerank', { body: { model: 'cohere/rerank-v3.5', query: 'Capital of France?', documents: ['Paris', 'Lyon'] } }).withResponse(),
      },
    ];
    for (const { provider, endpoint, calls, ask } of cases) {
      const own = await gw.createKey({ rateLimitRpm: 1000, budget: 1 });
      // Retries to spare: on a busy machine a retry may time out too while the first request still runs (it replays all the same).
      const client = new OpenAI({ apiKey: own.key, baseURL: gw.baseA, maxRetries: 4, timeout: 600, defaultHeaders: { 'X-Idempotency-Key': fresh() } });
      const { data, response } = await ask(client);
      expect(response.headers.get('idempotent-replayed'), endpoint).toBe('true');
      expect(sim.providers[provider]?.stats().byEndpoint[endpoint], endpoint).toBe(calls);
      const records = await usageOf([gw], own.id);
      // Recorded as a client that left (it did), at the whole cost, which the replay's usage says.
      expect(
        records.map((r) => [r.status, r.errorCode]),
        endpoint,
      ).toEqual([[499, 'client_closed']]);
      const billed = data as Billed;
      expect([records[0]?.promptTokens, records[0]?.units], endpoint).toEqual([billed.usage?.prompt_tokens ?? 0, billed.meta?.billed_units.search_units ?? 0]);
      expect(records[0]?.cost, endpoint).toBeGreaterThan(0);
      const { body: spent } = await gw.admin<{ spent: number }>('GET', `/keys/${own.id}`);
      expect(spent.spent, endpoint).toBeCloseTo(records[0]?.cost ?? -1, 12);
    }
  });

  it('a repeat that waits longer than its bound gets 409 with Retry-After, then the answer once it is there', async () => {
    const own = await impatient.createKey({ rateLimitRpm: 1000 });
    sim.providers.scaleway?.configure({ latencyMs: 800 });
    const answers = await Promise.all(Array.from({ length: 20 }, () => post(impatient.baseB, own.key, chatBody(), { 'x-idempotency-key': 'slow' })));
    const { fresh: first, replays, conflicts, other } = classify(answers);
    expect(other).toEqual([]);
    expect(first).toHaveLength(1);
    // 150 ms of waiting is far less than the 800 ms answer: every duplicate gets the 409.
    expect(conflicts).toHaveLength(19);
    expect(replays).toHaveLength(0);
    expect(conflicts[0]?.headers.get('retry-after')).toBe('1');
    const later = await post(impatient.baseB, own.key, chatBody(), { 'x-idempotency-key': 'slow' });
    expect([later.status, later.text, later.headers.get('idempotent-replayed')]).toEqual([200, first[0]?.text, 'true']);
    expect(chats()).toBe(1);
    expect(await usageOf([impatient], own.id)).toHaveLength(1);
  });

  it('a streamed request replays as the same stream, live while it runs and from storage after, without a new upstream call', async () => {
    const own = await gw.createKey({ rateLimitRpm: 1000 });
    sim.providers.scaleway?.configure({ chunkGapMs: 20 });
    const body = { ...chatBody('Stream it once'), stream: true };
    const headers = { 'x-idempotency-key': 'stream-1' };
    const firstRes = await streamRequest(gw.baseA, own.key, body, headers);
    // A duplicate while the first is still streaming follows it live.
    const live = streamRequest(gw.baseA, own.key, body, headers);
    const first = await readSse(firstRes);
    const during = await live;
    expect(during.headers.get('idempotent-replayed')).toBe('true');
    expect(during.headers.get('content-type')).toMatch(/^text\/event-stream/);
    expect(await readSse(during)).toEqual(first);
    expect(first.at(-1)?.data).toBe('[DONE]');
    // After the end, from the events stored with the answer (kept 24 hours, unlike the resume buffer).
    await eventually(async () => {
      const row = await gw.gateway.services.store.idempotency.get(idempotencyScope(own.id, 'stream-1'));
      const events = (row?.answer as StoredAnswer | undefined)?.stream?.events ?? [];
      expect(events.at(-1)?.kind).toBe('done');
      expect(events.filter((e) => e.kind !== 'usage').map((e) => e.data)).toEqual(first.map((e) => e.data));
    });
    const client = new OpenAI({ apiKey: own.key, baseURL: gw.baseA, maxRetries: 0 });
    const { data: replay, response } = await client.chat.completions
      .create({ ...body, messages: [{ role: 'user', content: 'Stream it once' }], stream: true }, { headers })
      .withResponse();
    const chunks = [];
    for await (const c of replay) chunks.push(c);
    expect(response.headers.get('idempotent-replayed')).toBe('true');
    expect(chunks.map((c) => JSON.stringify(c))).toEqual(first.slice(0, -1).map((e) => JSON.stringify(JSON.parse(e.data))));
    // A repeat that also names an event of this stream in Last-Event-ID gets only what follows it, as a resume would.
    const after = await readSse(await streamRequest(gw.baseA, own.key, body, { ...headers, 'Last-Event-ID': first[2]?.id as string }));
    expect(after.map((e) => e.id)).toEqual(first.slice(3).map((e) => e.id));
    expect(chats()).toBe(1);
    expect(await usageOf([gw], own.id)).toHaveLength(1);
  });

  it('a replayed stream whose client leaves mid-way (the SDK timing out and retrying) runs nothing again and is billed once, in both variants', async () => {
    sim.providers.scaleway?.configure({ chunkGapMs: 40 });
    for (const base of [gw.baseA, gw.baseB]) {
      sim.providers.scaleway?.resetStats();
      const own = await gw.createKey({ rateLimitRpm: 1000, budget: 1 });
      const client = new OpenAI({ apiKey: own.key, baseURL: base, maxRetries: 0 });
      const ask = { ...chatBody('Bill this stream once'), stream: true as const };
      const headers = { 'X-Idempotency-Key': 'leave-mid-replay', 'X-Gateway-Provider': 'scaleway' };
      const first = await client.chat.completions.create(ask, { headers });
      // The repeat follows the running stream live; its client reads one chunk and goes.
      const left = new AbortController();
      const repeat = await client.chat.completions.create(ask, { headers, signal: left.signal });
      for await (const _ of repeat) {
        left.abort();
      }
      let chunks = 0;
      for await (const _ of first) chunks++;
      expect(chunks).toBeGreaterThan(3);
      // The first stream's end settles its hold; a handler run after the replay would have made a call of its own.
      await new Promise((r) => setTimeout(r, 300));
      expect(chats()).toBe(1);
      const records = await usageOf([gw], own.id);
      expect(records.map((r) => r.status)).toEqual([200]);
      const { body: spent } = await gw.admin<{ spent: number }>('GET', `/keys/${own.id}`);
      expect(spent.spent).toBeCloseTo(records[0]?.cost ?? -1, 12);
    }
  });

  it('an upload’s bytes are part of the request: the same file replays, another file under the same key is a 422', async () => {
    const upload = (seconds: number) => {
      const form = new FormData();
      form.append('model', 'openai/whisper-large-v3');
      form.append('file', new Blob([new Uint8Array(wav(seconds))], { type: 'audio/wav' }), 'same-name.wav');
      return fetch(`${gw.baseA}/audio/transcriptions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key.key}`, 'x-idempotency-key': 'upload-1' },
        body: form,
      });
    };
    const first = await upload(1);
    expect(first.status).toBe(200);
    const again = await upload(1);
    expect([again.status, again.headers.get('idempotent-replayed'), await again.text()]).toEqual([200, 'true', await first.text()]);
    expect(sim.providers.scaleway?.stats().byEndpoint.transcriptions).toBe(1);
    expect((await upload(2)).status).toBe(422);
  });

  it('a claim left by a crashed instance expires, and the request then runs', async () => {
    const own = await gw.createKey({ rateLimitRpm: 1000 });
    const body = chatBody('After a crash');
    // What an instance that died mid-request leaves behind: a claim that is never refreshed, completed or released.
    const scope = idempotencyScope(own.id, 'orphan');
    await gw.gateway.services.idempotency.backend.claim(scope, fingerprint('POST', '/v1/chat/completions', body), 'crashed-instance', 400);
    const started = Date.now();
    const res = await post(gw.baseA, own.key, body, { 'x-idempotency-key': 'orphan' });
    expect(res.status).toBe(200);
    expect(res.headers.get('idempotent-replayed')).toBeNull();
    expect(Date.now() - started).toBeGreaterThanOrEqual(300);
    expect(chats()).toBe(1);
  });

  it('a stream a crashed process left unfinished (stored as begun, no session, never billed) does not hold its key: the retry runs', async () => {
    const own = await gw.createKey({ rateLimitRpm: 1000 });
    const body = { ...chatBody('Streamed before a crash'), stream: true };
    const scope = idempotencyScope(own.id, 'crashed-stream');
    const backend = gw.gateway.services.idempotency.backend;
    await backend.claim(scope, fingerprint('POST', '/v1/chat/completions', body), 'crashed-process', 60_000);
    await backend.complete(scope, 'crashed-process', { status: 200, headers: { 'content-type': 'text/event-stream' }, stream: { id: 'req_crashed' } }, 60_000);
    const res = await streamRequest(gw.baseA, own.key, body, { 'x-idempotency-key': 'crashed-stream' });
    expect(res.headers.get('idempotent-replayed')).toBeNull();
    expect((await readSse(res)).at(-1)?.data).toBe('[DONE]');
    expect(chats()).toBe(1);
    // A stream that ended and was billed, whose events are gone (its id stands for one here: a billed request's), is not run again: a clear 404.
    const billed = await post(gw.baseA, own.key, chatBody('billed'));
    await backend.claim(idempotencyScope(own.id, 'billed-stream'), fingerprint('POST', '/v1/chat/completions', body), 'old', 60_000);
    const done = { status: 200, headers: { 'content-type': 'text/event-stream' }, stream: { id: billed.headers.get('x-request-id') as string } };
    await backend.complete(idempotencyScope(own.id, 'billed-stream'), 'old', done, 60_000);
    await gw.gateway.services.usage.flush();
    await eventually(async () => {
      const gone = await streamRequest(gw.baseA, own.key, body, { 'x-idempotency-key': 'billed-stream' });
      expect(gone.status).toBe(404);
    });
    expect(chats()).toBe(2);
  });
});
