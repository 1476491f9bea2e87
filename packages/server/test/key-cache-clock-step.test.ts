import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, startPostgres } from '@gw/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN, startGateway, type TestGateway } from './helpers/gateway.js';
import { type GatewayProcess, spawnGateway } from './helpers/process.js';
import { steppableClockEnv, stepWallClock } from './helpers/step-clock.js';

// Instances sharing PostgreSQL without Redis: a revocation reaches the others once their cached copy of the key is
// older than GW_KEY_CACHE_TTL_MS (1 s here), by each one's own clock.
let postgres: PostgresServer;
let sim: Simulator;
let one: TestGateway;
let stepped: GatewayProcess;
let dir: string;

beforeAll(async () => {
  [postgres, sim] = await Promise.all([startPostgres(), startSimulator({ latencyScale: 0 })]);
  const databaseUrl = await postgres.createDatabase();
  one = await startGateway({ sim, databaseUrl, env: { GW_KEY_CACHE_TTL_MS: '1000' } });
  dir = mkdtempSync(join(tmpdir(), 'gw-key-cache-clock-'));
  writeFileSync(join(dir, 'gw.json'), JSON.stringify(sim.demoConfig()));
  stepped = await spawnGateway({
    GW_CONFIG: join(dir, 'gw.json'),
    GW_DATA_DIR: join(dir, 'data'),
    DATABASE_URL: databaseUrl,
    GW_ADMIN_TOKEN: ADMIN_TOKEN,
    GW_KEY_CACHE_TTL_MS: '1000',
    ...steppableClockEnv(dir),
  });
}, 120_000);
afterAll(async () => {
  stepped?.child.kill('SIGKILL');
  await one?.close();
  await sim?.close();
  await postgres?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function models(key: string): Promise<Response> {
  return fetch(`${stepped.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
}

describe('the key cache of an instance whose wall clock is stepped', () => {
  it('a step back of two minutes does not keep a key revoked elsewhere working for two minutes more', async () => {
    const { id, key } = await one.createKey();
    expect((await models(key)).status).toBe(200);
    await stepWallClock(stepped, dir, -120_000);
    expect((await one.admin('POST', `/keys/${id}/revoke`)).status).toBe(200);
    await new Promise((r) => setTimeout(r, 1_200));
    // The first use past the cache's life is still served from the copy while it is read again; the next is not.
    await (await models(key)).arrayBuffer();
    const deadline = Date.now() + 3_000;
    let status = 200;
    while (status === 200 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
      status = (await models(key)).status;
    }
    expect(status).toBe(401);
  }, 30_000);
});
