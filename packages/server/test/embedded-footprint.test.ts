import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Simulator, startSimulator } from '@gw/simulator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chatOnce, type GatewayProcess, spawnGateway } from './helpers/process.js';

const HOOK = new URL('./helpers/log-resolved-packages.mjs', import.meta.url).pathname;
const firstKeyOf = (out: string) => /Created the first API key \(shown once, keep it\): (gw_live_\S+)/.exec(out)?.[1];

let dir: string;
let simulator: Simulator;
let gw: GatewayProcess;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'gw-footprint-'));
  simulator = await startSimulator();
  writeFileSync(join(dir, 'gw.json'), JSON.stringify(simulator.demoConfig()));
  gw = await spawnGateway({ GW_CONFIG: join(dir, 'gw.json'), GW_DATA_DIR: join(dir, 'data'), NODE_OPTIONS: `--import=${HOOK}`, RESOLVED_LOG_DIR: dir }, 40_000);
}, 60_000);
afterAll(async () => {
  gw?.child.kill('SIGTERM');
  await gw?.exited;
  await simulator?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** The files each thread of the gateway loaded, by thread id (0: the main thread). */
function loadedByThread(): Map<string, string[]> {
  const logs = readdirSync(dir).filter((f) => f.endsWith('.log'));
  return new Map(logs.map((f) => [f.slice(0, -'.log'.length), readFileSync(join(dir, f), 'utf8').trim().split('\n')]));
}
const packageOf = (path: string) => /^((?:@[^/]+\/)?[^/]+)/.exec(path)?.[1] ?? path;

describe('an embedded gateway with a configuration file (no PostgreSQL, no Redis)', () => {
  it("serves without loading the other store's driver, a Redis client, all of undici or the simulator; its database thread without drizzle", async () => {
    const key = firstKeyOf(gw.output());
    expect(key).toBeDefined();
    expect((await chatOnce(gw.url, key as string)).status).toBe(200);
    const threads = loadedByThread();
    const main = threads.get('0') ?? [];
    const packages = new Set(main.map(packageOf));
    // What it needs is there: the hook saw the HTTP stack, the upstream pool and the embedded driver's proxy.
    expect([...packages]).toEqual(expect.arrayContaining(['fastify', 'undici', 'drizzle-orm', '@gw/server']));
    expect(main).toContain('undici/lib/dispatcher/pool.js');
    for (const unused of ['pg', 'ioredis', '@gw/simulator']) expect(packages.has(unused), unused).toBe(false);
    // undici's index would load fetch, WebSocket, the cache and the mocks.
    expect(main.filter((f) => f.startsWith('undici/') && /\/(web|mock|cache)\/|^undici\/index\.js$/.test(f))).toEqual([]);
    const database = [...threads].filter(([id, files]) => id !== '0' && files.some((f) => f.startsWith('@electric-sql/pglite/')));
    expect(database).toHaveLength(1);
    expect(database[0]?.[1].filter((f) => f.startsWith('drizzle-orm/'))).toEqual([]);
    expect(existsSync(join(dir, 'data', 'pglite', 'PG_VERSION'))).toBe(true);
  }, 30_000);
});
