import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { MAIN } from './helpers/process.js';

/** The built gateway, spawned with `env` (and PATH, PORT 0): what it writes to stdout and stderr together, and how it exits. */
function spawnMain(env: Record<string, string>) {
  const child = spawn(process.execPath, [MAIN], { env: { PATH: process.env.PATH ?? '', PORT: '0', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  const read = (d: Buffer) => {
    out += d.toString();
  };
  child.stdout.on('data', read);
  child.stderr.on('data', read);
  const exited = new Promise<{ code: number | null; signal: string | null }>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  return { child, output: () => out, exited };
}

/** Listens `upstream` and writes `dir`/gw.yaml: one OpenAI-type provider there, serving mistral/small. */
async function configFor(upstream: Server, dir: string): Promise<void> {
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', () => r()));
  const baseUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/v1`;
  writeFileSync(
    join(dir, 'gw.yaml'),
    `providers:\n  - id: alpha\n    type: openai\n    baseUrl: ${baseUrl}\n    apiKey: k\n    region: fr-par\nmodels:\n  - id: mistral/small\n    kind: chat\n    owned_by: mistral\n    offers:\n      - provider: alpha\n        upstreamModel: mistral-small\n        pricing: { prompt_per_1m: 0.2, completion_per_1m: 0.6, currency: EUR }\n`,
  );
}

/** Kills the gateway if it still runs, closes the fake provider and removes the test's folder. */
function cleanUp(child: ChildProcess, dir: string, upstream?: Server): void {
  if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  upstream?.closeAllConnections();
  upstream?.close();
  rmSync(dir, { recursive: true, force: true });
}

describe('a signal during the start', () => {
  it('SIGTERM then SIGINT before it listens: the start ends once the store is open, closes it, never serves, and exits 0', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-start-signal-'));
    // The provider's model list is held until the signals are sent: the start is then past opening the store, not listening yet.
    const held: ServerResponse[] = [];
    let asked: () => void = () => {};
    const listAsked = new Promise<void>((resolve) => {
      asked = resolve;
    });
    const upstream = createServer((req, res) => {
      held.push(res);
      if (req.url?.endsWith('/models')) asked();
    });
    await configFor(upstream, dir);
    const dataDir = join(dir, 'data');
    const { child, output, exited } = spawnMain({ GW_CONFIG: join(dir, 'gw.yaml'), GW_DATA_DIR: dataDir });
    try {
      await listAsked;
      // The lock of the embedded store this start opened.
      expect(existsSync(join(dataDir, 'pglite.lock'))).toBe(true);
      child.kill('SIGTERM');
      await new Promise((r) => setTimeout(r, 100));
      child.kill('SIGINT');
      await new Promise((r) => setTimeout(r, 100));
      for (const res of held) res.writeHead(200, { 'content-type': 'application/json' }).end('{"object":"list","data":[{"id":"mistral-small"}]}');
      // Killed by the signal, it exited with no code, no word, and the store's lock left behind.
      expect(await exited).toEqual({ code: 0, signal: null });
      expect(output()).toContain('gw: SIGTERM during the start: stopping once the store is open');
      expect(output()).toContain('gw: SIGINT: already stopping; the signal is ignored');
      expect(output()).toContain('gw: stopped (SIGTERM) before serving');
      expect(output()).not.toContain('listening on');
      expect(output()).not.toContain('first API key');
      expect(output()).not.toMatch(/Unhandled|\n\s+at /);
      expect(existsSync(join(dataDir, 'pglite.lock'))).toBe(false);
    } finally {
      cleanUp(child, dir, upstream);
    }
  }, 60_000);

  it('SIGTERM while the code still loads: kept until the start can act on it, which stops once the store is open and exits 0 (it was status 143, no word)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-early-signal-'));
    const { child, output, exited } = spawnMain({
      GW_DATA_DIR: join(dir, 'data'),
      NODE_OPTIONS: `--import ${new URL('./helpers/slow-start-load.mjs', import.meta.url).pathname}`,
    });
    await vi.waitFor(() => expect(output()).toContain('test: loading start.js'), { timeout: 30_000, interval: 10 });
    try {
      child.kill('SIGTERM');
      expect(await exited).toEqual({ code: 0, signal: null });
      expect(output()).toContain('gw: SIGTERM during the start: stopping once the store is open');
      expect(output()).toContain('gw: stopped (SIGTERM) before serving');
      expect(output()).not.toContain('listening on');
    } finally {
      cleanUp(child, dir);
    }
  }, 60_000);
});

describe('a signal while a model list is being fetched', () => {
  it('SIGTERM with nothing in flight but a model list the provider holds: the stop does not wait for that list (it waited out its 10 s timeout)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-stop-list-'));
    // The first list is answered (the gateway starts); every later one is held.
    let lists = 0;
    const held: ServerResponse[] = [];
    const upstream = createServer((req, res) => {
      if (req.url?.endsWith('/models') && lists++ === 0) {
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"object":"list","data":[{"id":"mistral-small"}]}');
        return;
      }
      held.push(res);
    });
    await configFor(upstream, dir);
    const { child, output, exited } = spawnMain({ GW_CONFIG: join(dir, 'gw.yaml'), GW_DATA_DIR: join(dir, 'data'), GW_REGISTRY_INTERVAL_S: '1' });
    try {
      await vi.waitFor(() => expect(held.length).toBeGreaterThan(0), { timeout: 30_000, interval: 50 });
      const sent = performance.now();
      child.kill('SIGTERM');
      expect(await exited).toEqual({ code: 0, signal: null });
      // The drain's own grace for requests already sent (200 ms), the usage write and the store's close: well under the list's 10 s.
      expect(performance.now() - sent).toBeLessThan(5_000);
      expect(output()).toContain('"msg":"stopped"');
    } finally {
      cleanUp(child, dir, upstream);
    }
  }, 60_000);
});
