import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, type RedisServer, startPostgres, startRedis } from '@gw/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';
import { post } from './helpers/idempotent.js';
import { spawnGateway } from './helpers/process.js';
import { readSse, streamRequest } from './helpers/sse.js';

let redis: RedisServer;
let pg: PostgresServer;
let sim: Simulator;
let databaseUrl: string;
let two: TestGateway;
const scaleway = () => sim.providers.scaleway;
const WAIT_MS = 10_000;

beforeAll(async () => {
  [redis, pg, sim] = await Promise.all([startRedis(), startPostgres(), startSimulator({ latencyScale: 0 })]);
  databaseUrl = await pg.createDatabase();
  two = await startGateway({ sim, redisUrl: redis.url, databaseUrl, env: { GW_IDEMPOTENCY_WAIT_MS: String(WAIT_MS) } });
}, 120_000);
afterAll(async () => {
  await two?.close();
  await sim?.close();
  await redis?.stop();
  await pg?.stop();
});

const body = { model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'A long answer, please' }], stream: true, max_tokens: 40 };

describe('a keyed stream whose instance was killed mid-stream, once its shared resume buffer expired (Redis and PostgreSQL shared)', () => {
  it('a repeat on another instance gets 404 stream_not_found in its variant’s envelope at once, not 409 "still in progress" for the key’s 24 hours; never run again', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-expired-stream-'));
    writeFileSync(join(dir, 'gw.json'), JSON.stringify(sim.demoConfig()));
    const doomed = await spawnGateway({ GW_CONFIG: join(dir, 'gw.json'), GW_DATA_DIR: join(dir, 'data'), REDIS_URL: redis.url, DATABASE_URL: databaseUrl });
    const client = new Redis(redis.url);
    scaleway()?.configure({ chunkGapMs: 200 });
    try {
      const { key } = await two.createKey({ rateLimitRpm: 1000 });
      const bases = { a: '/v1', b: '/alt/v1' } as const;
      const streams: Record<keyof typeof bases, string> = { a: '', b: '' };
      for (const variant of ['a', 'b'] as const) {
        const headers = { 'X-Idempotency-Key': `expired-${variant}`, 'X-Gateway-Provider': 'scaleway' };
        const res = await streamRequest(`${doomed.url}${bases[variant]}`, key, body, headers);
        streams[variant] = res.headers.get('x-request-id') as string;
        expect((await readSse(res, 2)).length).toBe(2);
      }
      // Killed mid-stream: its events are never stored with the key's answer, which names the stream only.
      doomed.child.kill('SIGKILL');
      await doomed.exited;
      // The buffer's expiry (10 minutes after the stream's end, 15 while it runs) removes both of its keys at once.
      for (const id of Object.values(streams)) expect(await client.del(`gw:stream:{${id}}:events`, `gw:stream:{${id}}:meta`)).toBe(2);
      const calls = scaleway()?.stats().total ?? 0;
      for (const variant of ['a', 'b'] as const) {
        for (let i = 0; i < 2; i++) {
          const started = performance.now();
          const res = await post(`${two.url}${bases[variant]}`, key, body, { 'X-Idempotency-Key': `expired-${variant}`, 'X-Gateway-Provider': 'scaleway' });
          const waited = performance.now() - started;
          const error = (JSON.parse(res.text) as { error: { code: string; type: string; message: string; param: string | null } }).error;
          expect([res.status, error.code, error.param]).toEqual([404, 'stream_not_found', 'X-Idempotency-Key']);
          expect(error.message).toBe('The stream first answered to this X-Idempotency-Key is no longer available.');
          // Variant A's type is its code; B's names the class.
          expect(error.type).toBe(variant === 'a' ? 'stream_not_found' : 'invalid_request_error');
          expect(waited).toBeLessThan(WAIT_MS);
        }
      }
      // Nothing ran again: no upstream call.
      expect(scaleway()?.stats().total).toBe(calls);
    } finally {
      scaleway()?.configure({ chunkGapMs: 0 });
      client.disconnect();
      if (doomed.child.exitCode === null) doomed.child.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    }
  }, 90_000);
});
