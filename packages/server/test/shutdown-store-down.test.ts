import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, startPostgres } from '@gw/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN, eventually } from './helpers/gateway.js';
import { chatOnce, type GatewayProcess, spawnGateway } from './helpers/process.js';

let sim: Simulator;
let pg: PostgresServer;
let proc: GatewayProcess;
let dir: string;

beforeAll(async () => {
  [sim, pg] = await Promise.all([startSimulator({ latencyScale: 0 }), startPostgres()]);
  dir = mkdtempSync(join(tmpdir(), 'gw-stop-store-down-'));
  const config = sim.demoConfig();
  // One provider whose model list cannot be fetched: its failure is logged.
  for (const p of config.providers) if (p.id === 'ovh') p.baseUrl = 'http://127.0.0.1:9/v1';
  writeFileSync(join(dir, 'gw.json'), JSON.stringify(config));
  proc = await spawnGateway({
    GW_CONFIG: join(dir, 'gw.json'),
    DATABASE_URL: await pg.createDatabase(),
    GW_ADMIN_TOKEN: ADMIN_TOKEN,
    GW_SHUTDOWN_TIMEOUT_MS: '3000',
    // A data directory that cannot be made: no spill, so the records wait in memory only.
    GW_DATA_DIR: '/dev/null/gw',
  });
}, 60_000);

afterAll(async () => {
  if (proc && proc.child.exitCode === null) proc.child.kill('SIGKILL');
  await sim?.close();
  await pg?.stop().catch(() => {});
  rmSync(dir, { recursive: true, force: true });
});

describe('stopping while the database is unreachable', () => {
  it('without a usable spill directory, retries the usage writes until the deadline, then says how many records are lost and exits 1', async () => {
    expect(proc.output()).toMatch(/usage spill directory .* cannot be used/);
    expect(proc.output()).toMatch(/"provider":"ovh".*model list of ovh could not be fetched: .*its models are unavailable until it answers/);
    const created = await fetch(`${proc.url}/admin/v1/keys`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    const { key } = (await created.json()) as { key: string };
    const ask = () =>
      fetch(`${proc.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'mistral/small', messages: [{ role: 'user', content: 'hi' }] }),
      });
    expect((await ask()).status).toBe(200);
    // Its usage is written within the flush interval (500 ms), before the database goes.
    await new Promise((r) => setTimeout(r, 900));
    await pg.kill();
    // A known key still serves while the database is away; its usage waits in memory.
    const answers = await Promise.all([ask(), ask(), ask()]);
    expect(answers.map((r) => r.status)).toEqual([200, 200, 200]);
    const started = performance.now();
    proc.child.kill('SIGTERM');
    expect(await proc.exited).toBe(1);
    // It kept trying until just before GW_SHUTDOWN_TIMEOUT_MS, not a fixed few times.
    expect(performance.now() - started).toBeGreaterThan(2_000);
    expect(proc.output()).toMatch(/"unwrittenUsageRecords":3.*3 usage records could not be written before the shutdown deadline/);
  }, 60_000);

  it('puts the records the database refuses in GW_DATA_DIR, exits 0, and the next start stores them once', async () => {
    await pg.restart();
    const database = await pg.createDatabase();
    const dbName = new URL(database).pathname.slice(1);
    const env = {
      GW_CONFIG: join(dir, 'gw.json'),
      DATABASE_URL: database,
      GW_ADMIN_TOKEN: ADMIN_TOKEN,
      GW_SHUTDOWN_TIMEOUT_MS: '3000',
      GW_DATA_DIR: join(dir, 'data'),
    };
    const first = await spawnGateway(env);
    const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };
    const { id, key } = (await (await fetch(`${first.url}/admin/v1/keys`, { method: 'POST', headers: admin })).json()) as { id: string; key: string };
    expect((await chatOnce(first.url, key)).status).toBe(200);
    const spentOf = async (url: string) => ((await (await fetch(`${url}/admin/v1/keys/${id}`, { headers: admin })).json()) as { spent: number }).spent;
    let one = 0;
    await eventually(async () => {
      one = await spentOf(first.url);
      expect(one).toBeGreaterThan(0);
    });
    // The database refuses the usage rows (the table is away) while keys keep working from the cache.
    await pg.psql('ALTER TABLE usage_records RENAME TO usage_records_away', dbName);
    const answers = await Promise.all([chatOnce(first.url, key), chatOnce(first.url, key), chatOnce(first.url, key)]);
    expect(answers.map((r) => r.status)).toEqual([200, 200, 200]);
    first.child.kill('SIGTERM');
    expect(await first.exited).toBe(0);
    expect(first.output()).toMatch(/usage: 3 records put in .*usage-spill/);
    const spillDir = join(dir, 'data', 'usage-spill');
    const [tagged] = readdirSync(spillDir);
    expect(readdirSync(join(spillDir, tagged as string))).toHaveLength(1);
    await pg.psql('ALTER TABLE usage_records_away RENAME TO usage_records', dbName);
    const second = await spawnGateway(env);
    try {
      expect(second.output()).toMatch(/1 spill segments left in .* by an earlier run/);
      await eventually(async () => expect(await spentOf(second.url)).toBeCloseTo(4 * one, 12), 10_000);
      // The segment goes once all its rows are in (a moment after the spend shows them).
      await eventually(() => expect(readdirSync(join(spillDir, tagged as string))).toHaveLength(0));
      expect(await pg.psql(`SELECT count(*) FROM usage_records WHERE key_id = '${id}'`, dbName)).toBe('4\n');
    } finally {
      second.child.kill('SIGTERM');
      await second.exited;
    }
  }, 60_000);
});
