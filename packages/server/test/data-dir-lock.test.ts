import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStore } from '../src/store/open.js';
import { eventually } from './helpers/gateway.js';
import { type GatewayProcess, MAIN, runGatewayToExit, spawnGateway } from './helpers/process.js';

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
    expect(readFileSync(join(dataDir, 'pglite.lock'), 'utf8')).toMatch(new RegExp(`^${gw.child.pid} \\d+( \\S+)?$`));
    gw.child.kill('SIGKILL');
    await gw.exited;
  }, 60_000);

  it("refuses a lock that another machine's gateway keeps touching with its clock 20 s behind, and takes over one that it does not touch", async () => {
    const dataDir = join(root, 'other-machine');
    mkdirSync(dataDir, { recursive: true });
    const lock = join(dataDir, 'pglite.lock');
    // Another machine's boot and pid namespace; its gateway touches the lock every 3 s, by its own clock.
    writeFileSync(lock, '1 12345 0b0e0b0e-0000-4000-8000-000000000000/4026531836');
    const touch = () => utimesSync(lock, new Date(Date.now() - 20_000), new Date(Date.now() - 20_000));
    touch();
    const holder = setInterval(touch, 3_000);
    try {
      const refused = await runGatewayToExit({ GW_DATA_DIR: dataDir });
      expect(refused.code).toBe(1);
      expect(refused.output).toContain('is in use by process 1 of another container or machine (its lock is kept fresh)');
    } finally {
      clearInterval(holder);
    }
    // Its gateway gone (the lock untouched since), the next start takes it over after watching it.
    const gw = await spawnGateway({ GW_DATA_DIR: dataDir });
    running.push(gw);
    expect(gw.output()).toContain('is held by a gateway of another container or machine');
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

/** Where this process may make pid namespaces (root with unshare): a gateway in one is a container's, pid 1. */
const canUnshare = (() => {
  try {
    execFileSync('unshare', ['--pid', '--fork', '--mount-proc', 'true'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();

/** The built gateway as pid 1 of a pid namespace of its own, as in a container; `kill` ends the gateway itself. */
function containerGateway(dataDir: string) {
  const child = spawn('unshare', ['--pid', '--fork', '--mount-proc', process.execPath, MAIN], {
    env: { PATH: process.env.PATH ?? '', PORT: '0', GW_DATA_DIR: dataDir },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  for (const s of [child.stdout, child.stderr]) s?.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const gateway = () =>
    Number(
      execFileSync('pgrep', ['-P', String(child.pid)])
        .toString()
        .trim(),
    );
  // unshare ignores SIGTERM while it waits for its child: the gateway is signalled itself.
  const stop = () => {
    if (child.exitCode !== null) return;
    try {
      process.kill(gateway(), 'SIGKILL');
    } catch {
      // Already gone.
    }
  };
  return { output: () => out, exited, kill: () => process.kill(gateway(), 'SIGKILL'), stop };
}

describe('one embedded store, one gateway, across containers sharing the volume', () => {
  it.skipIf(!canUnshare)(
    "refuses a second container's gateway while the first runs (each is pid 1), and starts one after the first was killed",
    async () => {
      const dataDir = join(root, 'containers');
      const started: ReturnType<typeof containerGateway>[] = [];
      const start = () => {
        const gw = containerGateway(dataDir);
        started.push(gw);
        return gw;
      };
      try {
        const first = start();
        await eventually(() => expect(first.output()).toContain('listening on'), 30_000);
        // Waits out the lock's freshness window (it is touched meanwhile), then refuses; both opened the files before.
        const second = start();
        const outcome = await Promise.race([second.exited, eventually(() => expect(second.output()).toContain('listening on'), 30_000).then(() => 'serving')]);
        expect(outcome).toBe(1);
        expect(second.output()).toContain(`the embedded database in ${dataDir} is in use by process 1 of another container or machine`);
        first.kill();
        await first.exited;
        const third = start();
        await eventually(() => expect(third.output()).toContain('listening on'), 40_000);
      } finally {
        for (const gw of started) gw.stop();
        await Promise.all(started.map((gw) => gw.exited));
      }
    },
    90_000,
  );
});
