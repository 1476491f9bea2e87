import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, type RedisServer, startPostgres, startRedis } from '@gw/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chatAt, worst } from './helpers/budget-chat.js';
import { ADMIN_TOKEN } from './helpers/gateway.js';
import { type GatewayProcess, spawnGateway } from './helpers/process.js';
import { steppableClockEnv, stepWallClock } from './helpers/step-clock.js';

// One instance sharing PostgreSQL, its Redis killed once it is up: budgets are held in the database's leases.
let redis: RedisServer;
let postgres: PostgresServer;
let sim: Simulator;
let gw: GatewayProcess;
let dir: string;

beforeAll(async () => {
  [redis, postgres, sim] = await Promise.all([startRedis(), startPostgres(), startSimulator({ latencyScale: 0 })]);
  dir = mkdtempSync(join(tmpdir(), 'gw-lease-clock-'));
  writeFileSync(join(dir, 'gw.json'), JSON.stringify(sim.demoConfig()));
  gw = await spawnGateway({
    GW_CONFIG: join(dir, 'gw.json'),
    GW_DATA_DIR: join(dir, 'data'),
    DATABASE_URL: await postgres.createDatabase(),
    REDIS_URL: redis.url,
    GW_ADMIN_TOKEN: ADMIN_TOKEN,
    ...steppableClockEnv(dir),
  });
  await redis.kill();
}, 60_000);

afterAll(async () => {
  if (gw && gw.child.exitCode === null) {
    gw.child.kill('SIGKILL');
    await gw.exited;
  }
  sim?.providers.scaleway?.configure({ latencyMs: 0 });
  await sim?.close();
  await redis?.stop();
  await postgres?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const chat = (key: string) => chatAt(`${gw.url}/v1`, key);

describe('budget leases of an instance whose wall clock is stepped while Redis is away', () => {
  it('a step forward of a minute does not let go of a lease the database still holds: the budget’s room is still admitted', async () => {
    const res = await fetch(`${gw.url}/admin/v1/keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ budget: worst * 11.5, rateLimitRpm: 1000 }),
    });
    const { key } = (await res.json()) as { key: string };
    // The first request after Redis went takes the budget to the leases (it costs at most a worst case).
    expect((await chat(key)).status).toBe(200);
    // Four requests running, held in a lease of about half the budget's room.
    sim.providers.scaleway?.configure({ latencyMs: 2_500 });
    const running = Array.from({ length: 4 }, () => chat(key));
    await new Promise((r) => setTimeout(r, 700));
    await stepWallClock(gw, dir, 60_000);
    // Room for six more worst cases: on the wall clock, the lease was taken as lapsed, its row kept its room in the
    // database for up to 30 s more, and these were refused 402 with the budget's room unspent.
    const more = await Promise.all(Array.from({ length: 6 }, () => chat(key)));
    const statuses = [...(await Promise.all(running)), ...more].map((r) => r.status);
    expect(statuses).toEqual(Array(10).fill(200));
  }, 30_000);
});
