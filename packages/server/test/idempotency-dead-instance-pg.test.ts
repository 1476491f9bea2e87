import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, startPostgres } from '@gw/testkit';
import OpenAI from 'openai';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';
import { chatBody, post, usageOf } from './helpers/idempotent.js';
import { spawnGateway } from './helpers/process.js';

// Instances sharing PostgreSQL without Redis: each says it is alive in gateway_instances.
let postgres: PostgresServer;
let sim: Simulator;
let databaseUrl: string;
let two: TestGateway;
let dir: string;
const scaleway = () => sim.providers.scaleway;
const chats = () => scaleway()?.stats().byEndpoint.chat ?? 0;

beforeAll(async () => {
  [postgres, sim] = await Promise.all([startPostgres(), startSimulator({ latencyScale: 0 })]);
  databaseUrl = await postgres.createDatabase();
  two = await startGateway({ sim, databaseUrl, env: { GW_IDEMPOTENCY_WAIT_MS: '20000' } });
  dir = mkdtempSync(join(tmpdir(), 'gw-pg-dead-claim-'));
  writeFileSync(join(dir, 'gw.json'), JSON.stringify(sim.demoConfig()));
}, 120_000);
afterAll(async () => {
  await two?.close();
  await sim?.close();
  await postgres?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function spawnOne(name: string) {
  return spawnGateway({ GW_CONFIG: join(dir, 'gw.json'), GW_DATA_DIR: join(dir, name), DATABASE_URL: databaseUrl });
}

describe('a keyed request whose instance was killed on instances sharing PostgreSQL without Redis', () => {
  it("mid-request: the SDK's retry on another instance runs within seconds, not 409 for the claim's 60 s; billed once", async () => {
    const own = await two.createKey({ rateLimitRpm: 1000 });
    const doomed = await spawnOne('mid-request');
    try {
      scaleway()?.configure({ latencyMs: 30_000 });
      const held = post(`${doomed.url}/alt/v1`, own.key, chatBody(), { 'x-idempotency-key': 'pg-killed' }).catch(() => null);
      await eventually(() => expect(scaleway()?.stats().inFlight).toBe(1), 10_000);
      doomed.child.kill('SIGKILL');
      await doomed.exited;
      expect(await held).toBeNull();
    } finally {
      scaleway()?.configure({ latencyMs: 0 });
      if (doomed.child.exitCode === null) doomed.child.kill('SIGKILL');
    }
    const before = chats();
    const started = Date.now();
    const client = new OpenAI({ apiKey: own.key, baseURL: two.baseB });
    const res = await client.chat.completions
      .create(chatBody() as OpenAI.ChatCompletionCreateParamsNonStreaming, { headers: { 'X-Idempotency-Key': 'pg-killed' } })
      .withResponse();
    // The killed instance's word lasts up to 6 s; the repeat waits for it to lapse, then runs.
    expect(Date.now() - started).toBeLessThan(15_000);
    expect(res.response.status).toBe(200);
    expect(res.response.headers.get('idempotent-replayed')).toBeNull();
    expect(chats() - before).toBe(1);
    // The killed request was never billed: only the retry is.
    expect(await usageOf([two], own.id)).toHaveLength(1);
    const again = await post(two.baseB, own.key, chatBody(), { 'x-idempotency-key': 'pg-killed' });
    expect([again.status, again.headers.get('idempotent-replayed')]).toEqual([200, 'true']);
  }, 90_000);

  it('after its request was billed but before its answer was kept: a repeat gets a final 422, never a second run', async () => {
    const own = await two.createKey({ rateLimitRpm: 1000 });
    const doomed = await spawnOne('billed');
    const db = new pg.Client({ connectionString: databaseUrl });
    await db.connect();
    try {
      const first = await post(`${doomed.url}/v1`, own.key, chatBody(), { 'x-idempotency-key': 'pg-billed' });
      expect(first.status).toBe(200);
      await eventually(async () => expect((await db.query('SELECT 1 FROM usage_records WHERE key_id = $1', [own.id])).rowCount).toBe(1), 5_000);
      // The answer as not yet kept: what an instance killed between its usage record and its answer leaves.
      const scope = `${own.id}:${createHash('sha256').update('pg-billed').digest('hex')}`;
      const reset = await db.query("UPDATE idempotency_keys SET state = 'pending', answer = NULL WHERE scope = $1", [scope]);
      expect(reset.rowCount).toBe(1);
      doomed.child.kill('SIGKILL');
      await doomed.exited;
    } finally {
      await db.end();
      if (doomed.child.exitCode === null) doomed.child.kill('SIGKILL');
    }
    const before = chats();
    for (const base of [two.baseA, two.baseB]) {
      const res = await post(base, own.key, chatBody(), { 'x-idempotency-key': 'pg-billed' });
      const error = (JSON.parse(res.text) as { error: { code: string; param: string | null } }).error;
      expect([res.status, error.param]).toEqual([422, 'X-Idempotency-Key']);
    }
    expect(chats()).toBe(before);
    expect(await usageOf([two], own.id)).toHaveLength(1);
  }, 90_000);
});
