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
let dir: string;
const running: GatewayProcess[] = [];

beforeAll(async () => {
  [sim, pg] = await Promise.all([startSimulator({ latencyScale: 0 }), startPostgres()]);
  dir = mkdtempSync(join(tmpdir(), 'gw-spill-shared-'));
  writeFileSync(join(dir, 'gw.json'), JSON.stringify(sim.demoConfig()));
}, 60_000);

afterAll(async () => {
  for (const p of running) if (p.child.exitCode === null) p.child.kill('SIGKILL');
  await sim?.close();
  await pg?.stop().catch(() => {});
  rmSync(dir, { recursive: true, force: true });
});

describe('two gateways sharing GW_DATA_DIR and PostgreSQL', () => {
  it('stores the records one of them left on disk when it stopped during an outage, without it being started again', async () => {
    const database = await pg.createDatabase();
    const dbName = new URL(database).pathname.slice(1);
    // The default GW_DATA_DIR (./data) is shared by every gateway started from the same directory.
    const env = { GW_CONFIG: join(dir, 'gw.json'), DATABASE_URL: database, GW_ADMIN_TOKEN: ADMIN_TOKEN, GW_DATA_DIR: join(dir, 'data') };
    const one = await spawnGateway(env);
    running.push(one);
    const two = await spawnGateway(env);
    running.push(two);
    const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };
    const { id, key } = (await (await fetch(`${one.url}/admin/v1/keys`, { method: 'POST', headers: admin })).json()) as { id: string; key: string };
    expect((await chatOnce(one.url, key)).status).toBe(200);
    const spentOf = async () => ((await (await fetch(`${two.url}/admin/v1/keys/${id}`, { headers: admin })).json()) as { spent: number }).spent;
    let cost = 0;
    await eventually(async () => {
      cost = await spentOf();
      expect(cost).toBeGreaterThan(0);
    });
    // The database refuses the usage rows (the table is away) while keys keep working from the cache.
    await pg.psql('ALTER TABLE usage_records RENAME TO usage_records_away', dbName);
    const answers = await Promise.all([chatOnce(one.url, key), chatOnce(one.url, key), chatOnce(one.url, key)]);
    expect(answers.map((r) => r.status)).toEqual([200, 200, 200]);
    one.child.kill('SIGTERM');
    expect(await one.exited).toBe(0);
    expect(one.output()).toMatch(/usage: 3 records put in .*usage-spill/);
    const spillDir = join(dir, 'data', 'usage-spill');
    const [tagged] = readdirSync(spillDir);
    const segments = join(spillDir, tagged as string);
    expect(readdirSync(segments)).toHaveLength(1);
    await pg.psql('ALTER TABLE usage_records_away RENAME TO usage_records', dbName);
    // The gateway still running stores them; before, they waited for a start on this directory, for good if none came.
    await eventually(async () => expect(await spentOf()).toBeCloseTo(4 * cost, 12), 15_000);
    await eventually(() => expect(readdirSync(segments)).toHaveLength(0));
    expect(await pg.psql(`SELECT count(*) FROM usage_records WHERE key_id = '${id}'`, dbName)).toBe('4\n');
    two.child.kill('SIGTERM');
    expect(await two.exited).toBe(0);
  }, 60_000);
});
