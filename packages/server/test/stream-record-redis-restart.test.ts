import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, type RedisServer, startPostgres, startRedis } from '@gw/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RECORD_PATIENCE_MS } from '../src/streaming/types.js';
import { startGateway, type TestGateway } from './helpers/gateway.js';
import { readSse, streamRequest } from './helpers/sse.js';

let redis: RedisServer;
let pg: PostgresServer;
let sim: Simulator;
let one: TestGateway;
let two: TestGateway;

/** Chunks this far apart: the stream's next batch after the restart comes well after a resume's patience runs out. */
const GAP_MS = RECORD_PATIENCE_MS + 2_000;

beforeAll(async () => {
  [redis, pg, sim] = await Promise.all([startRedis(), startPostgres(), startSimulator({ latencyScale: 0 })]);
  const databaseUrl = await pg.createDatabase();
  one = await startGateway({ sim, redisUrl: redis.url, databaseUrl });
  two = await startGateway({ sim, redisUrl: redis.url, databaseUrl });
}, 60_000);

afterAll(async () => {
  await Promise.all([one?.close(), two?.close()]);
  await sim?.close();
  await redis?.stop();
  await pg?.stop();
});

/** What a restart without persistence leaves: no data, and every client's connection dropped. */
async function emptyAndDropClients(): Promise<void> {
  const admin = new Redis(redis.url);
  try {
    await admin.flushall();
    await admin.client('KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
  } finally {
    admin.disconnect();
  }
}

const body = { model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'A slow answer, please' }], stream: true, max_tokens: 1 };

describe('when Redis restarts empty while a stream runs with long gaps between its chunks', () => {
  it('its instance writes the stream’s record again at the reconnect: a resume and a keyed repeat elsewhere read it, never a 404', async () => {
    sim.providers.scaleway?.configure({ chunkGapMs: GAP_MS });
    try {
      const { key } = await one.createKey({ rateLimitRpm: 1000 });
      const res = await streamRequest(one.baseA, key, body, { 'x-idempotency-key': 'slow-through-restart' });
      expect(res.status).toBe(200);
      const streamId = res.headers.get('x-request-id') as string;
      const reader = res.body?.getReader() as ReadableStreamDefaultReader<Uint8Array>;
      const decoder = new TextDecoder();
      let text = '';
      // The stream's second event: it is older than the patience of a reader elsewhere by then.
      while (!text.includes(`id: ${streamId}:2\n`)) {
        const { value, done } = await reader.read();
        if (done) throw new Error(`stream ended early: ${text}`);
        text += decoder.decode(value, { stream: true });
      }
      // Its batch is written (100 ms), then Redis loses everything, well before the next chunk.
      await new Promise((r) => setTimeout(r, 300));
      await emptyAndDropClients();
      // Reconnected (ioredis waits 200 ms first).
      await new Promise((r) => setTimeout(r, 700));
      const [resumed, repeated] = await Promise.all([
        streamRequest(two.baseA, key, body, { 'Last-Event-ID': `${streamId}:2` }),
        streamRequest(two.baseA, key, body, { 'x-idempotency-key': 'slow-through-restart' }),
      ]);
      expect([resumed.status, repeated.status]).toEqual([200, 200]);
      const rest = await readSse(resumed);
      // Exactly what the first client received after its second event.
      while (!text.includes('data: [DONE]')) {
        const { value, done } = await reader.read();
        if (done) break;
        text += decoder.decode(value, { stream: true });
      }
      const after = text
        .slice(text.indexOf(`id: ${streamId}:2\n`))
        .split('\n\n')
        .slice(1, -1)
        .filter((b) => !b.startsWith(':'));
      expect(rest.map((e) => `id: ${e.id}\ndata: ${e.data}`)).toEqual(after);
      expect(rest[0]?.id).toBe(`${streamId}:3`);
      expect(rest.at(-1)?.data).toBe('[DONE]');
      // The repeat reads the buffer from its start, which the restart emptied: it is told which events are missing.
      expect(repeated.headers.get('idempotent-replayed')).toBe('true');
      const replay = await readSse(repeated);
      expect(replay).toHaveLength(1);
      expect(JSON.parse(replay[0]?.data ?? '{}')).toMatchObject({ error: { code: 'service_unavailable' } });
      expect(replay[0]?.data).toContain('events 1 to 2');
    } finally {
      sim.providers.scaleway?.configure({ chunkGapMs: 15 });
    }
  }, 60_000);
});
