import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chatOnce, type GatewayProcess, spawnGateway } from './helpers/process.js';

const HOOK = new URL('./helpers/log-resolved-packages.mjs', import.meta.url).pathname;
const firstKeyOf = (out: string) => /Created the first API key \(shown once, keep it\): (gw_live_\S+)/.exec(out)?.[1];

let dir: string;
let gw: GatewayProcess;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'gw-footprint-'));
  gw = await spawnGateway({ GW_DATA_DIR: join(dir, 'data'), NODE_OPTIONS: `--import=${HOOK}`, RESOLVED_LOG_DIR: dir }, 40_000);
}, 60_000);
afterAll(async () => {
  gw?.child.kill('SIGTERM');
  await gw?.exited;
  rmSync(dir, { recursive: true, force: true });
});

/** The packages each thread of the gateway loaded, by thread id (0: the main thread). */
function loadedByThread(): Map<string, string[]> {
  const logs = readdirSync(dir).filter((f) => f.endsWith('.log'));
  return new Map(logs.map((f) => [f.slice(0, -'.log'.length), readFileSync(join(dir, f), 'utf8').trim().split('\n')]));
}

describe('an embedded gateway (no PostgreSQL, no Redis)', () => {
  it("serves without loading the other store's driver or a Redis client, and its database thread without drizzle", async () => {
    const key = firstKeyOf(gw.output());
    expect(key).toBeDefined();
    expect((await chatOnce(gw.url, key as string)).status).toBe(200);
    const threads = loadedByThread();
    const main = threads.get('0') ?? [];
    // What it needs is there: the hook saw the main thread's HTTP stack and the embedded driver's proxy.
    expect(main).toEqual(expect.arrayContaining(['fastify', 'undici', 'drizzle-orm']));
    expect(main).not.toContain('pg');
    expect(main).not.toContain('ioredis');
    const database = [...threads].filter(([id, pkgs]) => id !== '0' && pkgs.includes('@electric-sql/pglite'));
    expect(database).toHaveLength(1);
    expect(database[0]?.[1]).not.toContain('drizzle-orm');
    expect(existsSync(join(dir, 'data', 'pglite', 'PG_VERSION'))).toBe(true);
  }, 30_000);
});
