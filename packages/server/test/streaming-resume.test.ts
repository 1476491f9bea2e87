import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, type RedisServer, startPostgres, startRedis } from '@gw/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DELIVERED_LINGER_S, STREAM_RETENTION_S } from '../src/streaming/types.js';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';
import { readSse, type SseEvent, streamRequest } from './helpers/sse.js';

let redis: RedisServer;
let pg: PostgresServer;
let sim: Simulator;
let one: TestGateway;
let two: TestGateway;
let noGrace: TestGateway;

beforeAll(async () => {
  [redis, pg, sim] = await Promise.all([startRedis(), startPostgres(), startSimulator({ latencyScale: 0 })]);
  const databaseUrl = await pg.createDatabase();
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
  });
});
