import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, type RedisServer, startPostgres, startRedis } from '@gw/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeEvents } from '../src/streaming/event-batch.js';
import { DELIVERED_LINGER_S, STREAM_RETENTION_S } from '../src/streaming/types.js';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';
import { type GatewayProcess, spawnGateway } from './helpers/process.js';
import { readSse, type SseEvent, streamRequest } from './helpers/sse.js';

let redis: RedisServer;
let pg: PostgresServer;
let sim: Simulator;
let one: TestGateway;
let two: TestGateway;
let noGrace: TestGateway;
let databaseUrl: string;

beforeAll(async () => {
  [redis, pg, sim] = await Promise.all([startRedis(), startPostgres(), startSimulator({ latencyScale: 0 })]);
  databaseUrl = await pg.createDatabase();
  one = await startGateway({ sim, redisUrl: redis.url, databaseUrl });
  two = await startGateway({ sim, redisUrl: redis.url, databaseUrl });
  noGrace = await startGateway({ sim, env: { GW_STREAM_GRACE_S: '0' } });
  sim.providers.scaleway?.configure({ chunkGapMs: 15 });
}, 60_000);

afterAll(async () => {
  await Promise.all([one?.close(), two?.close(), noGrace?.close()]);
  await sim?.close();
  await redis?.stop();
  await pg?.stop();
});

const body = { model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'A long answer, please' }], stream: true, max_tokens: 40 };
const strip = (e: SseEvent) => e.data.replace(/"id":"[^"]*"|"created":\d+/g, '');

async function usage(gw: TestGateway, requestId: string) {
  await Promise.all([one.gateway.services.usage.flush(), two.gateway.services.usage.flush(), noGrace.gateway.services.usage.flush()]);
  return gw.gateway.services.store.usage.list({ requestId });
}

/**
 * A third instance sharing Redis and PostgreSQL, spawned as its own process so that a test can SIGKILL it
 * mid-stream (scaleway's chunks 200 ms apart meanwhile); removed, whatever the test did, when `fn` ends.
 */
/** Resumes on `gw` after the last of `received` and expects exactly the rest of the stream, which is billed once. */
async function resumeTheRest(gw: TestGateway, key: string, body: unknown, requestId: string, received: SseEvent[]): Promise<void> {
  const rest = await readSse(await streamRequest(gw.baseA, key, body, { 'Last-Event-ID': received.at(-1)?.id as string }));
  const ids = [...received, ...rest].map((e) => e.id);
  expect(ids).toEqual(ids.map((_, i) => `${requestId}:${i + 1}`));
  expect(rest.at(-1)?.data).toBe('[DONE]');
  await eventually(async () => expect(await usage(one, requestId)).toHaveLength(1));
}

async function withDoomedInstance(fn: (doomed: GatewayProcess) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'gw-killed-'));
  writeFileSync(join(dir, 'gw.json'), JSON.stringify(sim.demoConfig()));
  const doomed = await spawnGateway({ GW_CONFIG: join(dir, 'gw.json'), GW_DATA_DIR: join(dir, 'data'), REDIS_URL: redis.url, DATABASE_URL: databaseUrl });
  sim.providers.scaleway?.configure({ chunkGapMs: 200 });
  try {
    await fn(doomed);
  } finally {
    sim.providers.scaleway?.configure({ chunkGapMs: 15 });
    if (doomed.child.exitCode === null) doomed.child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('resume across instances sharing Redis', () => {
  it('a stream started on one instance is resumed on the other: the exact rest, one upstream call, one charge', async () => {
    const { key } = await one.createKey({ rateLimitRpm: 1000 });
    const full = await readSse(await streamRequest(one.baseA, key, body));
    sim.providers.scaleway?.resetStats();
    const controller = new AbortController();
    const res = await streamRequest(one.baseA, key, body, {}, controller.signal);
    const requestId = res.headers.get('x-request-id') as string;
    const head = await readSse(res, 4);
    controller.abort();
    const resumed = await streamRequest(two.baseA, key, body, { 'Last-Event-ID': head[3]?.id as string });
    // The resumed answer names where the stream was routed, as the first answer did.
    expect(resumed.headers.get('x-gateway-provider')).toBe(res.headers.get('x-gateway-provider'));
    expect(resumed.headers.get('x-gateway-provider')).toBe('scaleway');
    const rest = await readSse(resumed);
    expect([...head, ...rest].map(strip)).toEqual(full.map(strip));
    expect(rest.at(-1)?.data).toBe('[DONE]');
    expect(sim.providers.scaleway?.stats().byEndpoint.chat).toBe(1);
    await eventually(async () => expect(await usage(one, requestId)).toHaveLength(1));
    // Resuming again from the very start replays everything, still without a new upstream call.
    const replayed = await streamRequest(two.baseB, key, body, { 'Last-Event-ID': `${requestId}:0` });
    expect(['x-gateway-provider', 'x-gateway-region', 'x-gateway-strategy', 'x-gateway-routing-hops'].map((h) => replayed.headers.get(h) !== null)).toEqual([
      true,
      true,
      true,
      true,
    ]);
    const replay = await readSse(replayed);
    expect(replay.map(strip)).toEqual(full.map(strip));
    expect(sim.providers.scaleway?.stats().byEndpoint.chat).toBe(1);
  });

  it('a stream its client received whole is let go of after a short linger; one cut short keeps the full retention', async () => {
    const { key } = await one.createKey({ rateLimitRpm: 1000 });
    const whole = await streamRequest(one.baseA, key, body);
    const wholeId = whole.headers.get('x-request-id') as string;
    expect((await readSse(whole)).at(-1)?.data).toBe('[DONE]');
    const controller = new AbortController();
    const cut = await streamRequest(one.baseA, key, body, {}, controller.signal);
    const cutId = cut.headers.get('x-request-id') as string;
    await readSse(cut, 2);
    controller.abort();
    const client = new Redis(redis.url);
    try {
      await eventually(async () => {
        const ttl = await client.ttl(`gw:stream:{${wholeId}}:events`);
        expect(ttl).toBeGreaterThan(0);
        expect(ttl).toBeLessThanOrEqual(DELIVERED_LINGER_S);
      });
      // The cut stream runs on upstream to its end, then stays resumable for the full retention.
      await eventually(async () => expect(await client.ttl(`gw:stream:{${cutId}}:events`)).toBeGreaterThan(STREAM_RETENTION_S - 30));
      // Within the linger, the delivered stream still replays.
      expect((await readSse(await streamRequest(two.baseA, key, body, { 'Last-Event-ID': `${wholeId}:0` }))).at(-1)?.data).toBe('[DONE]');
    } finally {
      client.disconnect();
    }
  });

  it('a resume at or past the end of a finished stream answers at once with nothing, and the stream stays resumable', async () => {
    const { key } = await one.createKey({ rateLimitRpm: 1000 });
    const events = await readSse(await streamRequest(one.baseA, key, body));
    const lastId = events.at(-1)?.id as string;
    const [streamId, lastSeq] = lastId.split(':') as [string, string];
    for (const gw of [one, two]) {
      for (const after of [lastSeq, String(Number(lastSeq) + 40)]) {
        const started = performance.now();
        const res = await streamRequest(gw.baseA, key, body, { 'Last-Event-ID': `${streamId}:${after}` });
        expect([res.status, (await readSse(res)).length]).toEqual([200, 0]);
        expect(performance.now() - started).toBeLessThan(1000);
      }
    }
    const again = await readSse(await streamRequest(two.baseA, key, body, { 'Last-Event-ID': `${streamId}:3` }));
    expect(again.map(strip)).toEqual(events.slice(3).map(strip));
  });

  it('a resume elsewhere of a stream whose instance was killed ends with an error event, not a wait', async () => {
    await withDoomedInstance(async (doomed) => {
      const { key } = await one.createKey({ rateLimitRpm: 1000 });
      const res = await streamRequest(`${doomed.url}/v1`, key, body);
      const head = await readSse(res, 3);
      doomed.child.kill('SIGKILL');
      await doomed.exited;
      const started = performance.now();
      const rest = await readSse(await streamRequest(two.baseA, key, body, { 'Last-Event-ID': head[2]?.id as string }));
      const waited = performance.now() - started;
      const last = JSON.parse(rest.at(-1)?.data ?? '{}') as { error?: { code: string; message: string } };
      expect(last.error?.code).toBe('service_unavailable');
      expect(last.error?.message).toMatch(/instance relaying this stream is not answering/);
      // The gateway's own event carries no id: a client's last event id stays the stream's last real one.
      expect(rest.at(-1)?.id).toBeFalsy();
      expect(rest.map((e) => e.data)).not.toContain('[DONE]');
      // The instance's liveness lapses within 6 s, and a quiet resume checks on it every 2 s.
      expect(waited).toBeLessThan(12_000);
    });
  }, 40_000);

  it('a stream whose instance was killed before it ended is replayed to an X-Idempotency-Key retry as far as it got, then an error event; never run twice', async () => {
    await withDoomedInstance(async (doomed) => {
      const { key } = await one.createKey({ rateLimitRpm: 1000 });
      const idem = { 'X-Idempotency-Key': `killed-${Date.now()}`, 'X-Gateway-Provider': 'scaleway' };
      const head = await readSse(await streamRequest(`${doomed.url}/v1`, key, body, idem), 3);
      doomed.child.kill('SIGKILL');
      await doomed.exited;
      const calls = sim.providers.scaleway?.stats().total ?? 0;
      // An instance that looks gone may still be relaying (Redis restarted, a partition): running the request again could bill it twice.
      const retry = await streamRequest(two.baseA, key, body, idem);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      const events = await readSse(retry);
      // What reached the shared buffer before the kill (its last batch may not have), in order, then the loss.
      const relayed = events.filter((e) => e.id).map((e) => e.id);
      expect(relayed.length).toBeGreaterThan(0);
      const both = Math.min(relayed.length, head.length);
      expect(relayed.slice(0, both)).toEqual(head.map((e) => e.id).slice(0, both));
      expect((JSON.parse(events.at(-1)?.data ?? '{}') as { error?: { code: string } }).error?.code).toBe('service_unavailable');
      expect(sim.providers.scaleway?.stats().total).toBe(calls);
    });
  }, 60_000);

  it('a resume read from the shared buffer on an instance that shuts down ends with an error event before the deadline, not a reset; the rest is resumed elsewhere', async () => {
    const timeoutMs = 2_000;
    const draining = await startGateway({ sim, redisUrl: redis.url, databaseUrl, env: { GW_SHUTDOWN_TIMEOUT_MS: String(timeoutMs) } });
    sim.providers.scaleway?.configure({ chunkGapMs: 100, answerTokens: 60 });
    try {
      const { key } = await one.createKey({ rateLimitRpm: 1000 });
      const full = { ...body, max_tokens: 60, stream_options: { include_usage: true } };
      const controller = new AbortController();
      const res = await streamRequest(one.baseA, key, full, { 'X-Gateway-Provider': 'scaleway' }, controller.signal);
      const requestId = res.headers.get('x-request-id') as string;
      const head = await readSse(res, 3);
      controller.abort();
      // Read on the draining instance: the stream runs on `one`, far past the drain's deadline.
      const resumed = await streamRequest(draining.baseA, key, full, { 'Last-Event-ID': head[2]?.id as string });
      expect(resumed.status).toBe(200);
      const started = performance.now();
      const closing = draining.gateway.close();
      // The body ends cleanly (a reset would throw here) with the gateway's own error event, without an id.
      const middle = await readSse(resumed);
      expect(performance.now() - started).toBeLessThan(timeoutMs);
      await closing;
      const last = JSON.parse(middle.at(-1)?.data ?? '{}') as { error?: { code: string; message: string } };
      expect(last.error?.code).toBe('service_unavailable');
      expect(last.error?.message).toMatch(/shutting down/);
      expect(middle.at(-1)?.id).toBeFalsy();
      // The client resumes from its last event on another instance and gets exactly the rest, billed once.
      await resumeTheRest(two, key, full, requestId, [...head, ...middle.filter((e) => e.id)]);
    } finally {
      sim.providers.scaleway?.reset();
      sim.providers.scaleway?.configure({ chunkGapMs: 15 });
      await draining.close().catch(() => {});
    }
  }, 30_000);

  it('a resume its instance’s shutdown ended leaves the shared buffer as it was: the rest is resumed elsewhere after more than the delivered linger, the stream still running', async () => {
    const draining = await startGateway({ sim, redisUrl: redis.url, databaseUrl, env: { GW_SHUTDOWN_TIMEOUT_MS: '1000' } });
    // About 20 s of stream: it still runs when the resume elsewhere comes, past the 10 s a delivered stream keeps.
    sim.providers.scaleway?.configure({ chunkGapMs: 100, answerTokens: 200 });
    try {
      const { key } = await one.createKey({ rateLimitRpm: 1000 });
      const long = { ...body, max_tokens: 200, stream_options: { include_usage: true } };
      const controller = new AbortController();
      const res = await streamRequest(one.baseA, key, long, { 'X-Gateway-Provider': 'scaleway' }, controller.signal);
      const requestId = res.headers.get('x-request-id') as string;
      const head = await readSse(res, 3);
      controller.abort();
      const resumed = await streamRequest(draining.baseA, key, long, { 'Last-Event-ID': head[2]?.id as string });
      const closing = draining.gateway.close();
      const middle = await readSse(resumed);
      await closing;
      expect((JSON.parse(middle.at(-1)?.data ?? '{}') as { error?: { code: string } }).error?.code).toBe('service_unavailable');
      // That answer ended without the stream's end: its buffer was let go 10 s later, and the resume below met a hole
      // ("missing events 12 to 111") where the stream's events had expired while it ran on.
      await new Promise((r) => setTimeout(r, (DELIVERED_LINGER_S + 1) * 1000));
      await resumeTheRest(two, key, long, requestId, [...head, ...middle.filter((e) => e.id)]);
    } finally {
      sim.providers.scaleway?.reset();
      sim.providers.scaleway?.configure({ chunkGapMs: 15 });
      await draining.close().catch(() => {});
    }
  }, 60_000);

  it('with Redis gone, a stream is resumed from the instance relaying it; a stream it cannot look up is a 503 to retry, not a 500', async () => {
    const own = await startRedis();
    const gw = await startGateway({ sim, redisUrl: own.url });
    sim.providers.scaleway?.configure({ chunkGapMs: 100 });
    try {
      const { key } = await gw.createKey({ rateLimitRpm: 1000 });
      const controller = new AbortController();
      const head = await readSse(await streamRequest(gw.baseA, key, body, {}, controller.signal), 3);
      controller.abort();
      expect(await (await fetch(`${gw.url}/readyz`)).json()).toMatchObject({ redis: 'ok' });
      await own.stop();
      // Operators see it: /readyz says so (the instance still serves, its limits failing open) and gw_redis_up drops to 0.
      await eventually(async () => expect(await (await fetch(`${gw.url}/readyz`)).json()).toMatchObject({ status: 'ready', redis: 'unreachable' }));
      expect(await (await fetch(`${gw.url}/metrics`)).text()).toMatch(/^gw_redis_up 0$/m);
      const lastId = head[2]?.id ?? '';
      const rest = await readSse(await streamRequest(gw.baseA, key, body, { 'Last-Event-ID': lastId }));
      expect(rest[0]?.id).toBe(`${lastId.split(':')[0]}:4`);
      expect(rest.at(-1)?.data).toBe('[DONE]');
      const unknown = await streamRequest(gw.baseA, key, body, { 'Last-Event-ID': 'req_0123456789abcdef01234567:3' });
      expect([unknown.status, unknown.headers.get('retry-after')]).toEqual([503, '1']);
    } finally {
      sim.providers.scaleway?.configure({ chunkGapMs: 15 });
      await gw.close();
      await own.stop().catch(() => {});
    }
  }, 30_000);

  it('a resume elsewhere waits a moment for a stream whose record is not in Redis yet (its first write held up), instead of a final 404', async () => {
    const { id, key } = await one.createKey({ rateLimitRpm: 1000 });
    const streamId = `req_${'ab12'.repeat(6)}`;
    const resumed = streamRequest(two.baseA, key, body, { 'Last-Event-ID': `${streamId}:0` });
    await new Promise((r) => setTimeout(r, 800));
    const probe = new Redis(redis.url);
    try {
      await probe.hset(`gw:stream:{${streamId}}:meta`, 'keyId', id, 'model', body.model);
      const events = [
        { seq: 1, kind: 'chunk' as const, data: '{"choices":[]}' },
        { seq: 2, kind: 'done' as const, data: '[DONE]' },
      ];
      await probe.xadd(`gw:stream:{${streamId}}:events`, '2-1', 'e', encodeEvents(events));
    } finally {
      probe.disconnect();
    }
    const res = await resumed;
    expect(res.status).toBe(200);
    expect((await readSse(res)).map((e) => e.id)).toEqual([`${streamId}:1`, `${streamId}:2`]);
  });

  it('only the key that started a stream can resume it, on any instance', async () => {
    const owner = await one.createKey({ rateLimitRpm: 1000 });
    const stranger = await two.createKey({ rateLimitRpm: 1000 });
    const events = await readSse(await streamRequest(one.baseA, owner.key, body));
    const r = await streamRequest(two.baseA, stranger.key, body, { 'Last-Event-ID': events[2]?.id as string });
    expect(r.status).toBe(404);
  });
});

describe('a client that goes away', () => {
  it('within the grace period, the upstream is read to its end and billed from the provider’s count', async () => {
    const { key } = await one.createKey({ rateLimitRpm: 1000 });
    const complete = await streamRequest(one.baseA, key, body);
    await readSse(complete);
    const [reference] = await usage(one, complete.headers.get('x-request-id') as string);
    const controller = new AbortController();
    const res = await streamRequest(one.baseA, key, body, {}, controller.signal);
    const requestId = res.headers.get('x-request-id') as string;
    await readSse(res, 2);
    controller.abort();
    await eventually(async () => {
      const [record] = await usage(one, requestId);
      expect(record?.errorCode).toBeNull();
      expect(record?.completionTokens).toBe(reference?.completionTokens);
    }, 5000);
  });

  it('one that leaves before its answer: the upstream call stops, the request is recorded (499, cost 0) and its budget hold let go, streamed or not', async () => {
    const scaleway = sim.providers.scaleway;
    for (const stream of [false, true]) {
      const { id, key } = await one.createKey({ rateLimitRpm: 1000, budget: 5 });
      scaleway?.setFault({ kind: 'latency', ms: 1500 });
      scaleway?.resetStats();
      try {
        const controller = new AbortController();
        const sent = streamRequest(one.baseA, key, { ...body, stream }, { 'X-Gateway-Provider': 'scaleway' }, controller.signal);
        await eventually(() => expect(scaleway?.stats().inFlight).toBe(1));
        controller.abort();
        await expect(sent).rejects.toThrow();
        // Without its id (sent with the first byte) the client could never resume the stream: nothing runs on for it.
        await eventually(() => expect(scaleway?.stats().inFlight).toBe(0), 1000);
        await one.gateway.services.usage.flush();
        const records = await one.gateway.services.store.usage.list({ keyId: id });
        expect(records.map((r) => [r.status, r.errorCode, r.cost, r.completionTokens])).toEqual([[499, 'client_closed', 0, 0]]);
        expect(await one.gateway.services.ledger.peek(`key:${id}`, `key:${id}`)).toMatchObject({ reserved: 0 });
      } finally {
        scaleway?.clearFaults();
      }
    }
  });

  it('past the grace period, the upstream is aborted and the stream billed from what was relayed', async () => {
    const { key } = await noGrace.createKey({ rateLimitRpm: 1000 });
    const controller = new AbortController();
    const res = await streamRequest(noGrace.baseA, key, body, {}, controller.signal);
    const requestId = res.headers.get('x-request-id') as string;
    await readSse(res, 3);
    controller.abort();
    await eventually(async () => {
      const [record] = await usage(noGrace, requestId);
      expect(record?.errorCode).toBe('upstream_failed');
      expect(record?.completionTokens).toBeLessThan(10);
      expect(record?.cost).toBeGreaterThan(0);
    }, 5000);
    await eventually(() => expect(noGrace.gateway.services.sessions.size).toBe(0));
    // The gateway stopped the upstream for its client, so the metrics do not count it as the provider's error.
    const metrics = await (await fetch(`${noGrace.url}/metrics`)).text();
    expect(metrics).toMatch(/gw_upstream_duration_seconds_count\{provider="scaleway",outcome="stream_abandoned"\} 1\n/);
    expect(metrics).not.toContain('outcome="stream_error"');
  });
});
