import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
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
  dir = mkdtempSync(join(tmpdir(), 'gw-usage-outage-log-'));
  writeFileSync(join(dir, 'gw.json'), JSON.stringify(sim.demoConfig()));
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

describe('a database outage in the log and in /metrics', () => {
  it('is logged when it begins and when it ends, not at each of its failed usage writes, shows its backlog on disk, and loses no record', async () => {
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
    await link.cut();
    // Three seconds of traffic: six flushes (one each 500 ms), each refused by the database.
    for (let i = 0; i < 15; i++) {
      await ask();
      await new Promise((r) => setTimeout(r, 200));
    }
    // A key the instance has not cached is refused with 503 while the database is away; the log says why, once.
    for (let i = 0; i < 3; i++) {
      const unknown = `${key.slice(0, -4)}${key.endsWith('AAA0') ? 'BBB' : 'AAA'}${i}`;
      const refused = await fetch(`${proc.url}/v1/models`, { headers: { authorization: `Bearer ${unknown}` } });
      expect(refused.status).toBe(503);
    }
    expect(lines(/"level":40.*store unreachable: requests that need it/)).toHaveLength(1);
    // The backlog on disk shows in /metrics while the database is away.
    const gauge = async (name: string) => {
      const text = await (await fetch(`${proc.url}/metrics`)).text();
      return Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1]);
    };
    await eventually(async () => expect(await gauge('gw_usage_spill_segments')).toBeGreaterThanOrEqual(1), 5_000);
    expect(await gauge('gw_usage_spill_oldest_seconds')).toBeGreaterThan(1);
    await link.open();
    // Every request's record is stored once the database is back, none lost or doubled.
    const database = new URL(databaseUrl).pathname.slice(1);
    await eventually(async () => expect((await pg.psql(`SELECT count(*) FROM usage_records WHERE key_id = '${id}'`, database)).trim()).toBe('16'), 15_000);
    // The pool's open connections reset, then new ones refused: at most one line for each error, at warn.
    const warned = lines(/"level":40.*usage write failed/);
    expect(warned.length).toBeGreaterThanOrEqual(1);
    expect(warned.length).toBeLessThanOrEqual(2);
    expect(lines(/"level":40.*records put in .*usage-spill/)).toHaveLength(1);
    await eventually(() => expect(lines(/usage writes succeed again after \d+ failed attempts/)).toHaveLength(1), 15_000);
    const failed = Number(/after (\d+) failed attempts/.exec(lines(/usage writes succeed again/)[0] ?? '')?.[1]);
    expect(failed).toBeGreaterThanOrEqual(5);
    await eventually(async () => expect(await gauge('gw_usage_spill_segments')).toBe(0), 15_000);
    expect(await gauge('gw_usage_spill_oldest_seconds')).toBe(0);
  }, 60_000);
});
