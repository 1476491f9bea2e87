import { type IncomingMessage, request } from 'node:http';
import { Readable } from 'node:stream';
import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, type RedisServer, startPostgres, startRedis } from '@gw/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { collectGarbage } from '../src/lib/collect-garbage.js';
import { STREAM_RETENTION_S } from '../src/streaming/types.js';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';
import { readSse, type SseEvent, streamRequest } from './helpers/sse.js';

let redis: RedisServer;
let pg: PostgresServer;
let sim: Simulator;
/** Relays the streams. */
let one: TestGateway;
/** Resumes them, with the default send timeout. */
let two: TestGateway;
/** Resumes them, with a send timeout of one second. */
let quick: TestGateway;

beforeAll(async () => {
  [redis, pg, sim] = await Promise.all([startRedis(), startPostgres(), startSimulator({ latencyScale: 0 })]);
  const databaseUrl = await pg.createDatabase();
  one = await startGateway({ sim, redisUrl: redis.url, databaseUrl });
  two = await startGateway({ sim, redisUrl: redis.url, databaseUrl });
  quick = await startGateway({ sim, redisUrl: redis.url, databaseUrl, env: { GW_SEND_TIMEOUT_MS: '1000' } });
  // Long enough (about 20 MB, each chunk a word of the prompt's, 10 KB on average) that a resume whose client stops
  // reading is far behind in the shared buffer, and slow enough (2.5 s) that the resume's read of it keeps up until then.
  for (const p of Object.values(sim.providers)) p.configure(LONG);
}, 60_000);

afterAll(async () => {
  await Promise.all([one?.close(), two?.close(), quick?.close()]);
  await sim?.close();
  await redis?.stop();
  await pg?.stop();
});

const LONG = { answerTokens: 2_000, chunkGapMs: 1 };
const words = ['Ünïcödé', 'wörds', '東京', '🦊'].map((w) => w.repeat(1500)).join(' ');
const body = { model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: words }], stream: true };

/** A stream on `one` whose client read its first three events and left: the upstream is read on to its end. */
async function leftStream(key: string): Promise<{ streamId: string; lastId: string }> {
  const first = await streamRequest(one.baseA, key, body);
  const head = await readSse(first, 3);
  return { streamId: first.headers.get('x-request-id') as string, lastId: head[2]?.id as string };
}

/** A resume on `gw` whose answer is not read (Node's client, paused: fetch would take it all into its own buffer). */
function pausedResume(gw: TestGateway, key: string, lastId: string): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const req = request(`${gw.baseA}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'last-event-id': lastId },
    });
    req.on('response', (res) => resolve(res.pause()));
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

async function redisClients(client: Redis): Promise<number> {
  return Number(/connected_clients:(\d+)/.exec(await client.info('clients'))?.[1]);
}

describe('a resume read from the shared buffer', () => {
  it('whose buffer expires before it reaches the end ends with an error event, not a clean end that stops short', async () => {
    const { key } = await one.createKey({ rateLimitRpm: 1000 });
    // A pause early in the stream: the resume below begins before most of it is in the buffer.
    for (const p of Object.values(sim.providers)) p.setFault({ kind: 'stall', afterChunks: 5, ms: 1500, times: 1 });
    const { streamId, lastId } = await leftStream(key);
    // The rest from another instance, not read while the stream ends upstream: the read from the buffer waits.
    const resumed = await pausedResume(two, key, lastId);
    expect(resumed.statusCode).toBe(200);
    for (const p of Object.values(sim.providers)) p.clearFaults();
    await eventually(async () => {
      await one.gateway.services.usage.flush();
      expect(await one.gateway.services.store.usage.list({ requestId: streamId })).toHaveLength(1);
    }, 20_000);
    // Its buffer's expiry runs out meanwhile (the 10 s linger after another client took the end, or the retention).
    const client = new Redis(redis.url);
    try {
      // Once the stream's last batch is in (its expiry then the retention, no longer the grace period's added to it).
      await eventually(async () => expect(await client.ttl(`gw:stream:{${streamId}}:events`)).toBeLessThanOrEqual(STREAM_RETENTION_S));
      await client.pexpire(`gw:stream:{${streamId}}:events`, 1);
      await client.pexpire(`gw:stream:{${streamId}}:meta`, 1);
    } finally {
      client.disconnect();
    }
    const rest: SseEvent[] = await readSse(new Response(Readable.toWeb(resumed) as ReadableStream<Uint8Array>));
    const last = rest.at(-1) as SseEvent;
    // It stopped short of the stream's end, and says so where it stops, without an id.
    expect(rest.some((e) => e.data === '[DONE]')).toBe(false);
    expect(last.id).toBeUndefined();
    expect(JSON.parse(last.data)).toMatchObject({ error: { code: 'stream_not_found' } });
  }, 60_000);

  it('whose client stops taking it is closed after GW_SEND_TIMEOUT_MS, its Redis connection let go; it resumes again from there', async () => {
    const { key } = await one.createKey({ rateLimitRpm: 1000 });
    const { streamId, lastId } = await leftStream(key);
    const client = new Redis(redis.url);
    try {
      const before = await redisClients(client);
      const resumed = await streamRequest(quick.baseA, key, body, { 'Last-Event-ID': lastId });
      expect(resumed.status).toBe(200);
      // Its read of the buffer has a connection of its own; the client takes nothing more.
      await eventually(async () => expect(await redisClients(client)).toBe(before + 1));
      await eventually(async () => expect(await redisClients(client)).toBe(before), 10_000);
      // What reached the client is whole up to where it was cut; the rest is resumed from its last event.
      const got = await readSse(resumed).catch(() => null);
      const seen = got?.filter((e) => e.id !== undefined) ?? [];
      expect(seen.at(-1)?.data).not.toBe('[DONE]');
      const from = seen.at(-1)?.id ?? lastId;
      const rest = await readSse(await streamRequest(two.baseA, key, body, { 'Last-Event-ID': from }));
      expect(rest.at(-1)?.data).toBe('[DONE]');
      expect(rest[0]?.id).toBe(`${streamId}:${Number(from.split(':')[1]) + 1}`);
    } finally {
      client.disconnect();
    }
  }, 60_000);

  it('holds a bounded part of the buffer while its client does not read, not the whole stream', async () => {
    const { key } = await one.createKey({ rateLimitRpm: 1000 });
    const { streamId, lastId } = await leftStream(key);
    await eventually(async () => {
      await one.gateway.services.usage.flush();
      expect(await one.gateway.services.store.usage.list({ requestId: streamId })).toHaveLength(1);
    }, 20_000);
    const held = () => {
      collectGarbage();
      const m = process.memoryUsage();
      return (m.heapUsed + m.external) / 1024 / 1024;
    };
    const before = held();
    // Five resumes of the whole stream (about 20 MB of events, 40 MB as the heap holds them), none of them read.
    const resumes = await Promise.all(Array.from({ length: 5 }, () => pausedResume(two, key, lastId)));
    await new Promise((r) => setTimeout(r, 1000));
    const growth = held() - before;
    for (const r of resumes) r.destroy();
    // Each held its read of about a megabyte and what its sockets hold (about 55 MB in all); the whole stream, 230 MB.
    expect(growth).toBeLessThan(120);
  }, 60_000);

  it('past where a running stream is answers nothing once the stream ends short of it, not at the buffer’s expiry', async () => {
    const { key } = await one.createKey({ rateLimitRpm: 1000 });
    for (const p of Object.values(sim.providers)) p.configure({ answerTokens: 100, chunkGapMs: 20 });
    try {
      const { streamId, lastId } = await leftStream(key);
      const resumed = await streamRequest(two.baseA, key, body, { 'Last-Event-ID': `${streamId}:99999` });
      expect(resumed.status).toBe(200);
      const started = performance.now();
      // Its client left: the stream is kept for the whole retention (10 minutes) once it ends, about 2 s from now.
      const rest = await readSse(resumed);
      expect(rest).toEqual([]);
      expect(performance.now() - started).toBeLessThan(15_000);
      // The stream itself is whole and still resumable.
      const whole = await readSse(await streamRequest(two.baseA, key, body, { 'Last-Event-ID': lastId }));
      expect(whole.at(-1)?.data).toBe('[DONE]');
    } finally {
      for (const p of Object.values(sim.providers)) p.configure(LONG);
    }
  }, 60_000);
});
