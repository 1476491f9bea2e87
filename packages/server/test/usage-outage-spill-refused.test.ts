import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Simulator, startSimulator } from '@gw/simulator';
import { freePort, type PostgresServer, startPostgres } from '@gw/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN, eventually } from './helpers/gateway.js';
import { type GatewayProcess, spawnGateway } from './helpers/process.js';
import { Link } from './helpers/tcp-link.js';

let sim: Simulator;
let pg: PostgresServer;
let link: Link;
let proc: GatewayProcess;
let dir: string;
let databaseUrl: string;

beforeAll(async () => {
  [sim, pg] = await Promise.all([startSimulator({ latencyScale: 0 }), startPostgres()]);
  dir = mkdtempSync(join(tmpdir(), 'gw-usage-spill-refused-'));
  writeFileSync(join(dir, 'gw.json'), JSON.stringify(sim.demoConfig()));
  mkdirSync(join(dir, 'data'));
  databaseUrl = await pg.createDatabase();
  link = new Link(await freePort(), pg.port);
  await link.open();
  const viaLink = new URL(databaseUrl);
  viaLink.port = String(link.port);
  proc = await spawnGateway({
    GW_CONFIG: join(dir, 'gw.json'),
    DATABASE_URL: viaLink.toString(),
    GW_ADMIN_TOKEN: ADMIN_TOKEN,
    GW_DATA_DIR: join(dir, 'data'),
  });
}, 60_000);

afterAll(async () => {
  if (proc && proc.child.exitCode === null) proc.child.kill('SIGKILL');
  await link?.cut();
  await sim?.close();
  await pg?.stop().catch(() => {});
  rmSync(dir, { recursive: true, force: true });
});

const lines = (re: RegExp) =>
  proc
    .output()
    .split('\n')
    .filter((l) => re.test(l));

describe('a database outage while the usage spill cannot be written either (its disk full)', () => {
  it('warns once of each failure, not at every flush as the two alternate, counts no segment on disk, and loses no record', async () => {
    const created = await fetch(`${proc.url}/admin/v1/keys`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    const { id, key } = (await created.json()) as { id: string; key: string };
    const ask = async () => {
      const res = await fetch(`${proc.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'mistral/small', messages: [{ role: 'user', content: 'hi' }] }),
      });
      expect(res.status).toBe(200);
      await res.arrayBuffer();
    };
    await ask();
    // The spill directory's parent is a file from now on: every append fails, as on a full disk.
    writeFileSync(join(dir, 'data', 'usage-spill'), '');
    await link.cut();
    // Three seconds of traffic: six flushes, each refused by the database and then by the spill.
    for (let i = 0; i < 15; i++) {
      await ask();
      await new Promise((r) => setTimeout(r, 200));
    }
    const metrics = await (await fetch(`${proc.url}/metrics`)).text();
    expect(Number(/^gw_usage_write_errors_total (\S+)$/m.exec(metrics)?.[1])).toBeGreaterThanOrEqual(10);
    // Nothing is on disk, and /metrics says so: the records wait in memory.
    expect(metrics).toMatch(/^gw_usage_spill_segments 0$/m);
    expect(metrics).toMatch(/^gw_usage_records_pending [1-9]/m);
    // The pool's connections reset, new ones refused, the spill refused: a warning for each, no more.
    const warned = lines(/"level":40.*usage write failed/);
    expect(warned.length).toBeGreaterThanOrEqual(2);
    expect(warned.length).toBeLessThanOrEqual(3);
    await link.open();
    const database = new URL(databaseUrl).pathname.slice(1);
    await eventually(async () => expect((await pg.psql(`SELECT count(*) FROM usage_records WHERE key_id = '${id}'`, database)).trim()).toBe('16'), 15_000);
    // No segment was stored from disk: none was ever written.
    expect(lines(/records from .* stored/)).toEqual([]);
  }, 60_000);
});
