import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, type RedisServer, startPostgres, startRedis } from '@gw/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN, startGateway, type TestGateway } from './helpers/gateway.js';
import { post } from './helpers/idempotent.js';
import { type GatewayProcess, spawnGateway } from './helpers/process.js';
import { readSse, streamRequest } from './helpers/sse.js';
import { steppableClockEnv } from './helpers/step-clock.js';

// Two instances sharing Redis and PostgreSQL: `ahead` relays a keyed stream with its clock 30 s ahead
// of `two`'s, and is killed mid-stream, before the stream's shared record can be read.
let redis: RedisServer;
let pg: PostgresServer;
let sim: Simulator;
let two: TestGateway;
let ahead: GatewayProcess;
let dir: string;
const WAIT_MS = 6_000;

beforeAll(async () => {
  [redis, pg, sim] = await Promise.all([startRedis(), startPostgres(), startSimulator({ latencyScale: 0 })]);
  const databaseUrl = await pg.createDatabase();
  dir = mkdtempSync(join(tmpdir(), 'gw-stream-skew-'));
  writeFileSync(join(dir, 'gw.json'), JSON.stringify(sim.demoConfig()));
  [two, ahead] = await Promise.all([
    startGateway({ sim, redisUrl: redis.url, databaseUrl, env: { GW_IDEMPOTENCY_WAIT_MS: String(WAIT_MS) } }),
    spawnGateway({
      GW_CONFIG: join(dir, 'gw.json'),
      GW_DATA_DIR: join(dir, 'data'),
      REDIS_URL: redis.url,
      DATABASE_URL: databaseUrl,
      GW_ADMIN_TOKEN: ADMIN_TOKEN,
      ...steppableClockEnv(dir, 30_000),
    }),
  ]);
}, 60_000);

afterAll(async () => {
  if (ahead && ahead.child.exitCode === null) ahead.child.kill('SIGKILL');
  sim?.providers.scaleway?.configure({ chunkGapMs: 0 });
  await two?.close();
  await sim?.close();
  await redis?.stop();
  await pg?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const body = { model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'A long answer, please' }], stream: true, max_tokens: 40 };

describe('a keyed stream whose shared record is missing, repeated on an instance whose clock is behind the relaying one', () => {
  it('is the final 404 once the record cannot still be on its way (3 s by Redis’s clock), not 409 for as long as the clocks differ', async () => {
    const { key } = await two.createKey({ rateLimitRpm: 1000 });
    const client = new Redis(redis.url);
    sim.providers.scaleway?.configure({ chunkGapMs: 200 });
    try {
      const headers = { 'X-Idempotency-Key': 'skewed', 'X-Gateway-Provider': 'scaleway' };
      const first = await streamRequest(`${ahead.url}/v1`, key, body, headers);
      const id = first.headers.get('x-request-id') as string;
      expect((await readSse(first, 2)).length).toBe(2);
      ahead.child.kill('SIGKILL');
      await ahead.exited;
      // Gone from the buffer (or never written): the stream's answer names it, without its events.
      await client.del(`gw:stream:{${id}}:events`, `gw:stream:{${id}}:meta`);
      const repeat = await post(`${two.url}/v1`, key, body, headers);
      const error = (JSON.parse(repeat.text) as { error: { code: string } }).error;
      expect([repeat.status, error.code]).toEqual([404, 'stream_not_found']);
    } finally {
      client.disconnect();
    }
  }, 30_000);
});
