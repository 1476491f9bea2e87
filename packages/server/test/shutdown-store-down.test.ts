import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, startPostgres } from '@gw/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN } from './helpers/gateway.js';
import { type GatewayProcess, spawnGateway } from './helpers/process.js';

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
  });
}, 60_000);

afterAll(async () => {
  if (proc && proc.child.exitCode === null) proc.child.kill('SIGKILL');
  await sim?.close();
  await pg?.stop().catch(() => {});
  rmSync(dir, { recursive: true, force: true });
});

describe('stopping while the database is unreachable', () => {
  it('retries the usage writes until the deadline, then says how many records are lost and exits 1', async () => {
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
});
