import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, type RedisServer, startPostgres, startRedis } from '@gw/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RECORD_PATIENCE_MS } from '../src/streaming/types.js';
import { startGateway, type TestGateway } from './helpers/gateway.js';
import { chatBody, post, usageOf } from './helpers/idempotent.js';
import { readSse, streamRequest } from './helpers/sse.js';

let redis: RedisServer;
let pg: PostgresServer;
let sim: Simulator;
let one: TestGateway;
let two: TestGateway;
let admin: Redis;
const scaleway = () => sim.providers.scaleway;

/** Chunks this far apart: the stream's next batch after the flush comes well after a resume's patience runs out. */
const GAP_MS = RECORD_PATIENCE_MS + 2_000;

beforeAll(async () => {
  [redis, pg, sim] = await Promise.all([startRedis(), startPostgres(), startSimulator({ latencyScale: 0 })]);
  const databaseUrl = await pg.createDatabase();
  one = await startGateway({ sim, redisUrl: redis.url, databaseUrl });
  two = await startGateway({ sim, redisUrl: redis.url, databaseUrl, env: { GW_IDEMPOTENCY_WAIT_MS: '15000' } });
  admin = new Redis(redis.url);
}, 60_000);

afterAll(async () => {
  admin?.disconnect();
  await Promise.all([one?.close(), two?.close()]);
  await sim?.close();
  await redis?.stop();
  await pg?.stop();
});

const streamBody = { model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'A slow answer, please' }], stream: true, max_tokens: 1 };

// FLUSHALL (or FLUSHDB) empties Redis under open connections: no reconnect tells the instances.
describe('Redis flushed while keyed requests run, its connections kept open', () => {
  it('a keyed repeat of a running request on another instance waits for it and replays it, never runs it a second time (billed once)', async () => {
    scaleway()?.configure({ latencyMs: 6_000 });
    try {
      const { id: keyId, key } = await one.createKey({ rateLimitRpm: 1000 });
      const headers = { 'X-Idempotency-Key': 'flushed-chat', 'X-Gateway-Provider': 'scaleway' };
      const first = post(one.baseA, key, chatBody('Flushed'), headers);
      await new Promise((r) => setTimeout(r, 500));
      const calls = scaleway()?.stats().total ?? 0;
      await admin.flushall();
      const repeat = await post(two.baseA, key, chatBody('Flushed'), headers);
      const original = await first;
      expect(original.status).toBe(200);
      expect([repeat.status, repeat.headers.get('idempotent-replayed')]).toEqual([200, 'true']);
      expect(repeat.text).toBe(original.text);
      expect(scaleway()?.stats().total).toBe(calls);
      expect(await usageOf([one, two], keyId)).toHaveLength(1);
    } finally {
      scaleway()?.configure({ latencyMs: 0 });
    }
  }, 60_000);

  it('a keyed stream: its repeat elsewhere replays it rather than run it again, and a resume elsewhere finds it before its next chunk, never a 404', async () => {
    scaleway()?.configure({ chunkGapMs: GAP_MS });
    try {
      const { id: keyId, key } = await one.createKey({ rateLimitRpm: 1000 });
      const headers = { 'X-Idempotency-Key': 'flushed-stream', 'X-Gateway-Provider': 'scaleway' };
      const res = await streamRequest(one.baseA, key, streamBody, headers);
      expect(res.status).toBe(200);
      const streamId = res.headers.get('x-request-id') as string;
      const reader = res.body?.getReader() as ReadableStreamDefaultReader<Uint8Array>;
      const decoder = new TextDecoder();
      let text = '';
      while (!text.includes(`id: ${streamId}:2\n`)) {
        const { value, done } = await reader.read();
        if (done) throw new Error(`stream ended early: ${text}`);
        text += decoder.decode(value, { stream: true });
      }
      await new Promise((r) => setTimeout(r, 300));
      const calls = scaleway()?.stats().total ?? 0;
      await admin.flushall();
      const [resumed, repeated] = await Promise.all([
        streamRequest(two.baseA, key, streamBody, { 'Last-Event-ID': `${streamId}:2`, 'X-Gateway-Provider': 'scaleway' }),
        streamRequest(two.baseA, key, streamBody, headers),
      ]);
      expect([resumed.status, repeated.status]).toEqual([200, 200]);
      expect(repeated.headers.get('idempotent-replayed')).toBe('true');
      const [rest, replay] = await Promise.all([readSse(resumed), readSse(repeated)]);
      expect(rest[0]?.id).toBe(`${streamId}:3`);
      expect(rest.at(-1)?.data).toBe('[DONE]');
      // The flush took events 1 and 2 from the shared buffer: the repeat is told, never given a stream that skips them.
      expect(replay.at(-1)?.data).toContain('events 1 to 2');
      while (!text.includes('data: [DONE]')) {
        const { value, done } = await reader.read();
        if (done) break;
        text += decoder.decode(value, { stream: true });
      }
      expect(scaleway()?.stats().total).toBe(calls);
      expect(await usageOf([one, two], keyId)).toHaveLength(1);
    } finally {
      scaleway()?.configure({ chunkGapMs: 15 });
    }
  }, 60_000);
});
