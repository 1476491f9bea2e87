import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStore } from '../src/store/open.js';
import { type GatewayProcess, runGatewayToExit, spawnGateway } from './helpers/process.js';

let root: string;
const running: GatewayProcess[] = [];

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'gw-data-dir-lock-'));
});

afterAll(() => {
  for (const p of running) if (p.child.exitCode === null) p.child.kill('SIGKILL');
  rmSync(root, { recursive: true, force: true });
});

const firstKeyOf = (out: string) => /Created the first API key \(shown once, keep it\): (gw_live_\S+)/.exec(out)?.[1];

const models = (url: string, key: string) => fetch(`${url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });

describe('one embedded store, one gateway', () => {
  it('refuses a second gateway on the same GW_DATA_DIR, naming the first; the first serves on, and a restart after a kill -9 takes the lock over', async () => {
    const dataDir = join(root, 'shared');
    const first = await spawnGateway({ GW_DATA_DIR: dataDir });
    running.push(first);
    const key = firstKeyOf(first.output());
    expect(key).toBeDefined();
    const second = await runGatewayToExit({ GW_DATA_DIR: dataDir });
    expect(second.code).toBe(1);
    expect(second.output).toContain(`is in use by process ${first.child.pid}`);
    expect((await models(first.url, key as string)).status).toBe(200);

    first.child.kill('SIGKILL');
    await first.exited;
    const again = await spawnGateway({ GW_DATA_DIR: dataDir });
    running.push(again);
    expect(again.output()).not.toContain('Created the first API key');
    expect((await models(again.url, key as string)).status).toBe(200);
    again.child.kill('SIGKILL');
    await again.exited;
  }, 60_000);

  it('starts where the lock left by a killed gateway names a pid another process has taken since (a container restart, a reboot)', async () => {
    const dataDir = join(root, 'reused-pid');
    mkdirSync(dataDir, { recursive: true });
    // This test's own process runs, but it is not the one that wrote the lock: that one started at another time.
    writeFileSync(join(dataDir, 'pglite.lock'), `${process.pid} 1`);
    const gw = await spawnGateway({ GW_DATA_DIR: dataDir });
    running.push(gw);
    expect(readFileSync(join(dataDir, 'pglite.lock'), 'utf8')).toMatch(new RegExp(`^${gw.child.pid} \\d+$`));
    gw.child.kill('SIGKILL');
    await gw.exited;
  }, 60_000);

  it("takes over a lock naming its own pid from an earlier process (a container's gateway is pid 1 each time), and still refuses a second open in the same process", async () => {
    const dataDir = join(root, 'own-pid');
    mkdirSync(dataDir, { recursive: true });
    writeFileSync(join(dataDir, 'pglite.lock'), `${process.pid} 1`);
    const store = await openStore({ dataDir });
    try {
      await expect(openStore({ dataDir })).rejects.toThrow(/already open in this process/);
    } finally {
      await store.close();
    }
  }, 60_000);
});
