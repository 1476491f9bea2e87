import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, startPostgres } from '@gw/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';
import { post, usageOf } from './helpers/idempotent.js';
import { spawnGateway } from './helpers/process.js';
import { readSse, streamRequest } from './helpers/sse.js';

// Instances sharing PostgreSQL without Redis: stream buffers are in each instance's memory.
let pg: PostgresServer;
let sim: Simulator;
let databaseUrl: string;
let two: TestGateway;
let dir: string;
const scaleway = () => sim.providers.scaleway;
const WAIT_MS = 20_000;

beforeAll(async () => {
  [pg, sim] = await Promise.all([startPostgres(), startSimulator({ latencyScale: 0 })]);
  databaseUrl = await pg.createDatabase();
  two = await startGateway({ sim, databaseUrl, env: { GW_IDEMPOTENCY_WAIT_MS: String(WAIT_MS) } });
  dir = mkdtempSync(join(tmpdir(), 'gw-pg-dead-stream-'));
  writeFileSync(join(dir, 'gw.json'), JSON.stringify(sim.demoConfig()));
}, 120_000);
afterAll(async () => {
  await two?.close();
  await sim?.close();
  await pg?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const body = { model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'A long answer, please' }], stream: true, max_tokens: 40 };
const bases = { a: '/v1', b: '/alt/v1' } as const;

function spawnOne(name: string) {
  return spawnGateway({ GW_CONFIG: join(dir, 'gw.json'), GW_DATA_DIR: join(dir, name), DATABASE_URL: databaseUrl });
}

describe('a keyed stream on instances sharing PostgreSQL without Redis', () => {
  it('whose instance was killed mid-stream: a repeat on another instance gets the final 404 stream_not_found within seconds, not 409 "still in progress" for 24 hours; never run again', async () => {
    const doomed = await spawnOne('doomed');
    scaleway()?.configure({ chunkGapMs: 200 });
    try {
      const { id: keyId, key } = await two.createKey({ rateLimitRpm: 1000 });
      for (const variant of ['a', 'b'] as const) {
        const headers = { 'X-Idempotency-Key': `pg-dead-${variant}`, 'X-Gateway-Provider': 'scaleway' };
        const res = await streamRequest(`${doomed.url}${bases[variant]}`, key, body, headers);
        expect((await readSse(res, 2)).length).toBe(2);
      }
      doomed.child.kill('SIGKILL');
      await doomed.exited;
      const calls = scaleway()?.stats().total ?? 0;
      for (const variant of ['a', 'b'] as const) {
        const started = performance.now();
        const res = await post(`${two.url}${bases[variant]}`, key, body, { 'X-Idempotency-Key': `pg-dead-${variant}`, 'X-Gateway-Provider': 'scaleway' });
        const waited = performance.now() - started;
        const error = (JSON.parse(res.text) as { error: { code: string; type: string; message: string; param: string | null } }).error;
        expect([res.status, error.code, error.param]).toEqual([404, 'stream_not_found', 'X-Idempotency-Key']);
        expect(error.message).toBe('The stream first answered to this X-Idempotency-Key is no longer available.');
        expect(error.type).toBe(variant === 'a' ? 'stream_not_found' : 'invalid_request_error');
        // The killed instance's word lapses 6 s after its last; then the repeat has its answer at its next look.
        expect(waited).toBeLessThan(WAIT_MS);
      }
      // And at once after that, still without running it again.
      const again = await post(`${two.url}/v1`, key, body, { 'X-Idempotency-Key': 'pg-dead-a', 'X-Gateway-Provider': 'scaleway' });
      expect(again.status).toBe(404);
      expect(scaleway()?.stats().total).toBe(calls);
      expect(await usageOf([two], keyId)).toEqual([]);
    } finally {
      scaleway()?.configure({ chunkGapMs: 0 });
      if (doomed.child.exitCode === null) doomed.child.kill('SIGKILL');
    }
  }, 90_000);

  it('whose instance is alive and still streaming past those 6 s: a repeat on another instance waits and replays it whole, billed once', async () => {
    const live = await spawnOne('live');
    scaleway()?.configure({ chunkGapMs: 700 });
    try {
      const { id: keyId, key } = await two.createKey({ rateLimitRpm: 1000 });
      const headers = { 'X-Idempotency-Key': 'pg-live', 'X-Gateway-Provider': 'scaleway' };
      const started = performance.now();
      const res = await streamRequest(`${live.url}/v1`, key, body, headers);
      const first = readSse(res);
      await new Promise((r) => setTimeout(r, 300));
      const repeat = await post(`${two.url}/v1`, key, body, headers);
      const original = await first;
      expect(performance.now() - started).toBeGreaterThan(7_000);
      expect(repeat.status).toBe(200);
      expect(repeat.headers.get('idempotent-replayed')).toBe('true');
      expect(original.at(-1)?.data).toBe('[DONE]');
      expect(repeat.text.trimEnd().endsWith('data: [DONE]')).toBe(true);
      // One upstream call, one usage record (the live instance's).
      await new Promise((r) => setTimeout(r, 1_500));
      expect((await usageOf([two], keyId)).length).toBe(1);
    } finally {
      scaleway()?.configure({ chunkGapMs: 0 });
      live.child.kill('SIGKILL');
      await live.exited;
    }
  }, 90_000);
});
