import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, startPostgres } from '@gw/testkit';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN } from './helpers/gateway.js';
import { chatOnce, type GatewayProcess, spawnGateway } from './helpers/process.js';
import { steppableClockEnv, stepWallClock } from './helpers/step-clock.js';

// An instance started with its wall clock an hour ahead of the database's, then stepped two hours back: its usage
// records are stamped with the database's time all the same.
let postgres: PostgresServer;
let sim: Simulator;
let proc: GatewayProcess;
let db: pg.Client;
let dir: string;

beforeAll(async () => {
  [postgres, sim] = await Promise.all([startPostgres(), startSimulator({ latencyScale: 0 })]);
  const databaseUrl = await postgres.createDatabase();
  dir = mkdtempSync(join(tmpdir(), 'gw-usage-clock-'));
  writeFileSync(join(dir, 'gw.json'), JSON.stringify(sim.demoConfig()));
  proc = await spawnGateway({
    GW_CONFIG: join(dir, 'gw.json'),
    GW_DATA_DIR: join(dir, 'data'),
    DATABASE_URL: databaseUrl,
    GW_ADMIN_TOKEN: ADMIN_TOKEN,
    ...steppableClockEnv(dir, 3_600_000),
  });
  db = new pg.Client({ connectionString: databaseUrl });
  await db.connect();
}, 120_000);
afterAll(async () => {
  proc?.child.kill('SIGKILL');
  await db?.end();
  await sim?.close();
  await postgres?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** How far (ms) a request's usage record's time is from the database's clock when it was stored. */
async function recordOffset(requestId: string): Promise<number> {
  for (let i = 0; i < 50; i++) {
    const { rows } = await db.query<{ off: number }>(
      'SELECT (extract(epoch FROM created_at - now()) * 1000)::float8 AS off FROM usage_records WHERE request_id = $1',
      [requestId],
    );
    if (rows[0]) return rows[0].off;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`no usage record of ${requestId}`);
}

describe('usage records of an instance whose wall clock is off', () => {
  it('are stamped with the database’s time, not an hour ahead or behind', async () => {
    const res = await fetch(`${proc.url}/admin/v1/keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ rateLimitRpm: 100 }),
    });
    const { key } = (await res.json()) as { key: string };
    for (const step of [0, -7_200_000]) {
      if (step !== 0) await stepWallClock(proc, dir, step);
      const chat = await chatOnce(proc.url, key);
      expect(chat.status).toBe(200);
      const off = await recordOffset(chat.headers.get('x-request-id') as string);
      // Written within the flush's 500 ms (and the polling's 100): a little before now, never an hour off.
      expect(Math.abs(off)).toBeLessThan(5_000);
    }
  }, 60_000);
});
