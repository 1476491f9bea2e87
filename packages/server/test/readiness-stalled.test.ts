import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, type RedisServer, startPostgres, startRedis } from '@gw/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from './helpers/gateway.js';
import { type GatewayProcess, spawnGateway } from './helpers/process.js';

// A Kubernetes readiness probe gives up after 1 s by default. /readyz waited 2 s for a stalled PostgreSQL, and 2.5 s
// with Redis stalled too (one after the other), so every instance sharing them failed its probe at once and left the
// service, where the gateway is meant to stay ready (serving from its caches, its limits failing open).

let sim: Simulator;
let pg: PostgresServer;
let redis: RedisServer;
let proc: GatewayProcess | undefined;
let dir: string;

beforeAll(async () => {
  [sim, pg, redis] = await Promise.all([startSimulator({ latencyScale: 0 }), startPostgres(), startRedis()]);
  dir = mkdtempSync(join(tmpdir(), 'gw-readiness-stalled-'));
  writeFileSync(join(dir, 'gw.json'), JSON.stringify(sim.demoConfig()));
  proc = await spawnGateway({ GW_CONFIG: join(dir, 'gw.json'), GW_DATA_DIR: join(dir, 'data'), DATABASE_URL: await pg.createDatabase(), REDIS_URL: redis.url });
}, 60_000);

afterAll(async () => {
  pg?.resume();
  redis?.resume();
  if (proc && proc.child.exitCode === null) proc.child.kill('SIGKILL');
  await Promise.all([sim?.close(), pg?.stop(), redis?.stop()]);
  rmSync(dir, { recursive: true, force: true });
});

/** /readyz's status, body and how long it took, in ms. */
async function readyz(url: string) {
  const startedAt = performance.now();
  const res = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(10_000) });
  const body = (await res.json()) as { status: string; store: string; redis: string };
  return { status: res.status, body, ms: performance.now() - startedAt };
}

describe('readiness while the database or Redis is stalled', () => {
  it('answers within a probe’s 1 s, ready, saying which does not answer', async () => {
    const url = (proc as GatewayProcess).url;
    expect(await readyz(url)).toMatchObject({ status: 200, body: { status: 'ready', store: 'ok', redis: 'ok' } });

    pg.pause();
    for (let i = 0; i < 2; i++) {
      const stalled = await readyz(url);
      expect(stalled).toMatchObject({ status: 200, body: { status: 'ready', store: 'unreachable', redis: 'ok' } });
      expect(stalled.ms).toBeLessThan(1_000);
    }

    redis.pause();
    const both = await readyz(url);
    expect(both).toMatchObject({ status: 200, body: { status: 'ready', store: 'unreachable', redis: 'unreachable' } });
    expect(both.ms).toBeLessThan(1_000);

    pg.resume();
    redis.resume();
    await eventually(async () => expect((await readyz(url)).body).toMatchObject({ store: 'ok', redis: 'ok' }), 10_000);
  }, 60_000);
});
