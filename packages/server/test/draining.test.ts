import { connect, type Socket } from 'node:net';
import { type Simulator, startSimulator } from '@gw/simulator';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { idempotencyScope } from '../src/routing/idempotency.js';
import { openStore } from '../src/store/open.js';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';

let sim: Simulator;
let gw: TestGateway;

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
});
beforeEach(async () => {
  gw = await startGateway({ sim });
});
afterEach(async () => {
  await gw?.close().catch(() => {});
});
afterAll(async () => {
  await sim?.close();
});

/** What one raw keep-alive connection has received so far, and whether it has closed. */
function rawConnection(port: number): { socket: Socket; received: () => string; closed: Promise<void> } {
  const socket = connect(port, '127.0.0.1');
  let out = '';
  socket.on('data', (d) => {
    out += String(d);
  });
  socket.on('error', () => {});
  return { socket, received: () => out, closed: new Promise((r) => socket.on('close', () => r())) };
}

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

  it('reads what clients had already sent on idle kept-alive connections and answers it 503, rather than resetting it', async () => {
    const { key } = await gw.createKey({ rateLimitRpm: 1000 });
    const port = Number(new URL(gw.url).port);
    const get = `GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\n\r\n`;
    const conns = Array.from({ length: 10 }, () => rawConnection(port));
    for (const c of conns) c.socket.write(get);
    // Each connection answered once, and now idle.
    while (conns.some((c) => !c.received().includes('"data"'))) await new Promise((r) => setTimeout(r, 10));
    const firsts = conns.map((c) => c.received().length);
    const closing = gw.close();
    // The drain has begun; the next requests were on their way on every connection.
    await new Promise((r) => setTimeout(r, 20));
    for (const c of conns) c.socket.write(get);
    // While those are read, a new connection is refused.
    const refused = await new Promise((resolve) => connect(port, '127.0.0.1').once('connect', resolve).once('error', resolve));
    expect((refused as { code?: string } | undefined)?.code).toBe('ECONNREFUSED');
    await Promise.all(conns.map((c) => c.closed));
    await closing;
    const seconds = conns.map((c, i) => c.received().slice(firsts[i]));
    expect(seconds.map((s) => s.slice(0, 12))).toEqual(conns.map(() => 'HTTP/1.1 503'));
    for (const s of seconds) expect(s).toMatch(/\r\nconnection: close\r\n/i);
  });

  it("answers the operators' probes on connections it already had: /readyz says draining, a scrape still reads the metrics", async () => {
    const port = Number(new URL(gw.url).port);
    const conns = ['/readyz', '/metrics'].map((path) => ({ path, ...rawConnection(port) }));
    for (const c of conns) c.socket.write(`GET ${c.path} HTTP/1.1\r\nHost: x\r\n\r\n`);
    while (conns.some((c) => !/\r\n\r\n[\s\S]+/.test(c.received()))) await new Promise((r) => setTimeout(r, 10));
    const firsts = conns.map((c) => c.received().length);
    const closing = gw.close();
    await new Promise((r) => setTimeout(r, 20));
    for (const c of conns) c.socket.write(`GET ${c.path} HTTP/1.1\r\nHost: x\r\n\r\n`);
    await Promise.all(conns.map((c) => c.closed));
    await closing;
    const [ready, metrics] = conns.map((c, i) => c.received().slice(firsts[i]));
    expect(ready).toMatch(/^HTTP\/1\.1 503 /);
    expect(JSON.parse(ready.slice(ready.indexOf('{')))).toEqual({ status: 'draining' });
    expect(metrics).toMatch(/^HTTP\/1\.1 200 /);
    expect(metrics).toMatch(/\ngw_requests_in_flight /);
  });

  it('closes a connection whose stream ended during the drain at its end, while another stream still runs, rather than answer its next request 503', async () => {
    const { key } = await gw.createKey({ rateLimitRpm: 1000 });
    sim.providers.scaleway?.configure({ chunkGapMs: 100 });
    try {
      const port = Number(new URL(gw.url).port);
      const post = (maxTokens: number) => {
        const body = JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'hi' }], stream: true, max_tokens: maxTokens });
        return `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nX-Gateway-Provider: scaleway\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
      };
      // A short stream and a long one (about 4 s), both begun with keep-alive before the drain.
      const short = rawConnection(port);
      const long = rawConnection(port);
      short.socket.write(post(3));
      long.socket.write(post(40));
      while (!short.received().includes('data: ') || !long.received().includes('data: ')) await new Promise((r) => setTimeout(r, 5));
      const closing = gw.close();
      // A pooled client would send its next request on the short stream's connection and get a 503 for as long as it
      // stays open: it is closed as the stream ends, as an answer saying connection: close is, not with the drain.
      await short.closed;
      expect(short.received()).toMatch(/data: \[DONE\]\n\n\r\n0\r\n\r\n$/);
      expect(long.received()).not.toContain('[DONE]');
      await long.closed;
      await closing;
      expect(long.received()).toContain('[DONE]');
    } finally {
      sim.providers.scaleway?.configure({ chunkGapMs: 0 });
    }
  }, 15_000);

  it('answers the requests still waiting on a provider before its deadline (503, Retry-After: 1), and records them', async () => {
    const timeoutMs = 2_000;
    const short = await startGateway({ sim, env: { GW_SHUTDOWN_TIMEOUT_MS: String(timeoutMs) } });
    const dataDir = short.gateway.services.config.dataDir;
    try {
      const { id, key } = await short.createKey({ budget: 1 });
      // Its provider accepts the requests and never answers (its own timeout is 30 s, far past the shutdown's).
      sim.providers.scaleway?.setFault({ kind: 'hang' });
      const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-gateway-provider': 'scaleway' };
      const ask = (base: string, stream: boolean, more: Record<string, string> = {}) =>
        fetch(`${base}/chat/completions`, {
          method: 'POST',
          headers: { ...headers, ...more },
          body: JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'hi' }], max_tokens: 10, stream }),
        });
      // The last: a stream with an idempotency key, which would outlive its client, is answered too.
      const asked = [ask(short.baseA, false), ask(short.baseB, false), ask(short.baseA, true), ask(short.baseB, true, { 'x-idempotency-key': 'drain-1' })];
      await eventually(() => expect(sim.providers.scaleway?.stats().inFlight).toBe(4));
      const started = Date.now();
      const closing = short.gateway.close();
      const answers = await Promise.all(asked);
      expect(Date.now() - started).toBeLessThan(timeoutMs);
      expect(answers.map((r) => r.status)).toEqual([503, 503, 503, 503]);
      expect(answers.map((r) => r.headers.get('retry-after'))).toEqual(['1', '1', '1', '1']);
      const bodies = (await Promise.all(answers.map((r) => r.json()))) as { error: { code: string; message: string } }[];
      expect(bodies.map((b) => b.error.code)).toEqual(['service_unavailable', 'service_unavailable', 'service_unavailable', 'service_unavailable']);
      expect(bodies[0]?.error.message).toMatch(/shutting down/);
      // A clean stop: every record written before the exit.
      await closing;
      const store = await openStore({ dataDir });
      try {
        const records = await store.usage.list({ keyId: id });
        expect(records.map((r) => [r.status, r.errorCode, r.cost])).toEqual([
          [503, 'shutting_down', 0],
          [503, 'shutting_down', 0],
          [503, 'shutting_down', 0],
          [503, 'shutting_down', 0],
        ]);
      } finally {
        await store.close();
      }
    } finally {
      sim.providers.scaleway?.clearFaults();
      await short.close().catch(() => {});
    }
  }, 15_000);

  it.each([
    ['an answer', false],
    ['a stream not yet begun', true],
  ])(
    'waits for a keyed request whose client left (%s): its answer is kept for the retry and billed once',
    async (_, stream) => {
      const { id, key } = await gw.createKey({ rateLimitRpm: 1000 });
      const dataDir = gw.gateway.services.config.dataDir;
      sim.providers.scaleway?.setFault({ kind: 'latency', ms: 1_500 });
      // A stream that runs on for a second after it begins, with nobody reading it.
      if (stream) sim.providers.scaleway?.configure({ chunkGapMs: 100 });
      const calls = () => sim.providers.scaleway?.stats().recent.filter((r) => r.endpoint === 'chat') ?? [];
      const before = calls().length;
      const answered = await fetch(`${gw.baseA}/models/meta/llama-3.3-70b`, { headers: { authorization: `Bearer ${key}` } });
      expect(answered.status).toBe(200);
      const embedded = await fetch(`${gw.baseA}/embeddings`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-idempotency-key': 'answered-1' },
        body: JSON.stringify({ model: 'mistral/embed', input: 'x' }),
      });
      expect(embedded.status).toBe(200);
      expect(gw.gateway.services.lifecycle.claimsHeld).toBe(0);
      try {
        const left = new AbortController();
        const asked = fetch(`${gw.baseA}/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-gateway-provider': 'scaleway', 'x-idempotency-key': 'left-1' },
          body: JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'hi' }], stream, max_tokens: 10 }),
          signal: left.signal,
        }).catch(() => null);
        await eventually(() => expect(sim.providers.scaleway?.stats().inFlight).toBe(1));
        left.abort();
        expect(await asked).toBeNull();
        await eventually(() => expect(gw.gateway.services.lifecycle.inFlight).toBe(0));
        // The client is gone, its request runs on, holding its key's claim (one answered gives its own back: below).
        expect(gw.gateway.services.lifecycle.claimsHeld).toBe(1);
        await gw.gateway.close();
        // One call, answered whole: not cut by the exit, nor tried again on other providers.
        expect(
          calls()
            .slice(before)
            .map((r) => r.status),
        ).toEqual([200]);
        const store = await openStore({ dataDir });
        try {
          const records = (await store.usage.list({ keyId: id })).filter((r) => r.model === 'meta/llama-3.3-70b');
          // The client's leaving, at the whole answer's cost.
          expect(records.map((r) => [r.status, r.errorCode, r.streamed])).toEqual([[499, 'client_closed', stream]]);
          expect(records[0]?.cost).toBeGreaterThan(0);
          // The answer is the key's: a retry on another instance gets it, not a second call.
          expect(await store.idempotency.get(idempotencyScope(id, 'left-1'))).toMatchObject({ state: 'done' });
        } finally {
          await store.close();
        }
      } finally {
        sim.providers.scaleway?.reset();
      }
    },
    15_000,
  );

  it('ends with an error event, and bills, a stream that began after the drain began and still runs near the deadline', async () => {
    const timeoutMs = 2_000;
    const short = await startGateway({ sim, env: { GW_SHUTDOWN_TIMEOUT_MS: String(timeoutMs) } });
    const dataDir = short.gateway.services.config.dataDir;
    try {
      const { id, key } = await short.createKey({ budget: 1 });
      // Its first chunk comes 400 ms after the drain begins (before the 1.5 s mark), the rest far past the deadline.
      sim.providers.scaleway?.configure({ answerTokens: 40 });
      sim.providers.scaleway?.setFault({ kind: 'latency', ms: 500, perChunkMs: 200 });
      const asked = fetch(`${short.baseA}/chat/completions`, {
        method: 'POST',
        // With an idempotency key: a stream the shutdown ended does not stay the key's answer.
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-gateway-provider': 'scaleway', 'x-idempotency-key': 'cut-1' },
        body: JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'hi' }], stream: true }),
      });
      await eventually(() => expect(sim.providers.scaleway?.stats().inFlight).toBe(1));
      const started = Date.now();
      const closing = short.gateway.close();
      const answer = await asked;
      expect(answer.status).toBe(200);
      // The body ends cleanly (no reset) with the shutdown's error event and no [DONE].
      const body = await answer.text();
      expect(Date.now() - started).toBeLessThan(timeoutMs);
      // The gateway's own reason, in the variant's envelope: not the provider's failure.
      expect(body).toMatch(
        /"error":\{"message":"This gateway instance is shutting down and ended the stream[^"]*","type":"service_unavailable","code":"service_unavailable"/,
      );
      expect(body).not.toContain('[DONE]');
      await closing;
      const store = await openStore({ dataDir });
      try {
        const records = await store.usage.list({ keyId: id });
        expect(records.map((r) => [r.status, r.errorCode, r.streamed])).toEqual([[200, 'shutting_down', true]]);
        expect(records[0]?.cost).toBeGreaterThan(0);
        // The key is free: a retry with it runs on another instance.
        expect(await store.idempotency.get(idempotencyScope(id, 'cut-1'))).toBeNull();
      } finally {
        await store.close();
      }
    } finally {
      sim.providers.scaleway?.clearFaults();
      sim.providers.scaleway?.reset();
      await short.close().catch(() => {});
    }
  }, 15_000);
});
