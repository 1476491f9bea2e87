import { type RedisServer, startRedis } from '@gw/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_IN_FLIGHT_CHARS, MAX_WAITING_CHARS } from '../src/streaming/redis-stream-store.js';
import { startGateway, type TestGateway } from './helpers/gateway.js';

// Many large streams read as fast as they come: Redis, which keeps every event for a resume elsewhere, is slower.
let redis: RedisServer;
let gw: TestGateway;
let admin: Redis;

beforeAll(async () => {
  redis = await startRedis();
  gw = await startGateway({ redisUrl: redis.url });
  admin = new Redis(redis.url);
}, 60_000);

afterAll(async () => {
  admin?.disconnect();
  await gw?.close();
  await redis?.stop();
});

/** What waits in the stream store's connection, not yet taken by Redis. */
const unsent = () => (gw.gateway.services.streams as unknown as { redis: Redis }).redis.stream?.writableLength ?? 0;

describe('streams relayed faster than Redis keeps them', () => {
  it('what waits for Redis stays bounded (batches wait gathered, one timed out is not sent again whole), and every event is kept', async () => {
    const providers = Object.values(gw.sim.providers);
    for (const p of providers) p?.configure({ latencyMs: 0, ttftMs: 0, chunkGapMs: 0, answerTokens: 50_000 });
    const { key } = await gw.createKey({ rateLimitRpm: 1000 });
    /** A stream read to its end: its id and how many events it had. */
    const stream = async () => {
      const res = await fetch(`${gw.baseA}/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'mistral/small', stream: true, max_tokens: 100_000, messages: [{ role: 'user', content: 'hi' }] }),
      });
      let events = 0;
      let tail = '';
      for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
        const text = tail + Buffer.from(chunk).toString('latin1');
        const lines = text.split('\n');
        tail = lines.pop() ?? '';
        for (const line of lines) if (line.startsWith('id: ')) events++;
      }
      return { id: res.headers.get('x-request-id') as string, events };
    };
    let most = 0;
    const watch = setInterval(() => {
      most = Math.max(most, unsent());
    }, 20);
    let streams: { id: string; events: number }[];
    try {
      streams = await Promise.all(Array.from({ length: 30 }, stream));
    } finally {
      clearInterval(watch);
      for (const p of providers) p?.configure({ answerTokens: null });
    }
    for (const s of streams) expect(s.events).toBeGreaterThan(40_000);
    // Before, each write that timed out went again with all its stream gathered since: 377 MB waited here at once.
    // Now a batch is sent only while less than the bound is in flight, so at most the bound and one stream's batch:
    // what a stream may keep waiting (past it, it gives up its gathered events), with each event's header line (a
    // quarter more, generously). Under a full suite's load such a batch grew past 16 M characters (40.9 M waited
    // once, against the 32 M this test first allowed).
    expect(most).toBeLessThan(MAX_IN_FLIGHT_CHARS + 1.25 * MAX_WAITING_CHARS);
    // Once Redis has caught up, each stream's buffer ends with its last event (the usage chunk's and [DONE]'s own ids
    // past the content's). A stream written whole to its end lingers 10 s, then goes: one gone was whole.
    await expect
      .poll(
        async () => {
          let complete = 0;
          for (const s of streams) {
            const [last] = (await admin.xrevrange(`gw:stream:{${s.id}}:events`, '+', '-', 'COUNT', 1)) as [string, string[]][];
            if (!last || Number(last[0].split('-')[0]) >= s.events) complete++;
          }
          return complete;
        },
        { timeout: 60_000, interval: 500 },
      )
      .toBe(streams.length);
  }, 180_000);
});
