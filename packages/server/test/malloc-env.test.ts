import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { type GatewayProcess, spawnGateway } from './helpers/process.js';

// scripts/malloc-env.mjs: the allocator `npm start` runs the gateway on. Run as `npm start` runs it.
const SCRIPT = new URL('../../../scripts/malloc-env.mjs', import.meta.url).pathname;

function mallocEnvOf(env: Record<string, string>): Record<string, string> {
  const out = execFileSync(process.execPath, [SCRIPT], { env: { PATH: process.env.PATH ?? '', ...env }, encoding: 'utf8' }).trim();
  return Object.fromEntries(
    out
      .split(/\s+/)
      .filter(Boolean)
      .map((pair) => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)]),
  );
}

const ldconfig = existsSync('/sbin/ldconfig') ? execFileSync('/sbin/ldconfig', ['-p'], { encoding: 'utf8' }) : '';
// Debian's redis-server depends on libjemalloc2, so wherever the suites' Redis is installed, jemalloc is too.
const haveJemalloc = /\blibjemalloc\.so\.2\b/.test(ldconfig);

describe('the allocator npm start runs the gateway on', () => {
  let gateway: GatewayProcess | undefined;
  const dataDir = mkdtempSync(join(tmpdir(), 'gw-malloc-env-'));
  afterAll(async () => {
    gateway?.child.kill('SIGKILL');
    await gateway?.exited;
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('is jemalloc with its background thread where the system has it, glibc with a fixed mmap threshold otherwise', () => {
    const env = mallocEnvOf({});
    if (process.env.CI === 'true') expect(haveJemalloc, 'libjemalloc2 is installed with redis-server').toBe(true);
    if (haveJemalloc) {
      expect(env.LD_PRELOAD).toMatch(/\/libjemalloc\.so\.2$/);
      expect(existsSync(env.LD_PRELOAD ?? '')).toBe(true);
      expect(env.MALLOC_CONF).toBe('background_thread:true,dirty_decay_ms:1000');
    } else {
      expect(env).toEqual({ MALLOC_MMAP_THRESHOLD_: '131072' });
    }
  });

  it("leaves the operator's choice alone: an LD_PRELOAD already set, even empty, and a MALLOC_CONF already set", () => {
    expect(mallocEnvOf({ LD_PRELOAD: '' })).toEqual({});
    if (haveJemalloc) expect(mallocEnvOf({ MALLOC_CONF: 'narenas:1' }).MALLOC_CONF).toBe('narenas:1');
  });

  it.runIf(haveJemalloc)('is loaded into the gateway process, which serves on it', async () => {
    gateway = await spawnGateway({ ...mallocEnvOf({}), GW_DATA_DIR: dataDir });
    const maps = readFileSync(`/proc/${gateway.child.pid}/maps`, 'utf8');
    expect(maps).toMatch(/\/libjemalloc\.so\.2$/m);
    const health = await fetch(`${gateway.url}/healthz`);
    expect(health.status).toBe(200);
  });
});
