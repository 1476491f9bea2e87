import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { MAIN } from './helpers/process.js';

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
    await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', () => r()));
    const baseUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/v1`;
    writeFileSync(
      join(dir, 'gw.yaml'),
      `providers:\n  - id: alpha\n    type: openai\n    baseUrl: ${baseUrl}\n    apiKey: k\n    region: fr-par\nmodels:\n  - id: mistral/small\n    kind: chat\n    owned_by: mistral\n    offers:\n      - provider: alpha\n        upstreamModel: mistral-small\n        pricing: { prompt_per_1m: 0.2, completion_per_1m: 0.6, currency: EUR }\n`,
    );
    const dataDir = join(dir, 'data');
    const child = spawn(process.execPath, [MAIN], {
      env: { PATH: process.env.PATH ?? '', PORT: '0', GW_CONFIG: join(dir, 'gw.yaml'), GW_DATA_DIR: dataDir },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
    });
    child.stderr.on('data', (d: Buffer) => {
      out += d.toString();
    });
    const exited = new Promise<{ code: number | null; signal: string | null }>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
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
      expect(out).toContain('gw: SIGTERM during the start: stopping once the store is open');
      expect(out).toContain('gw: SIGINT: already stopping; the signal is ignored');
      expect(out).toContain('gw: stopped (SIGTERM) before serving');
      expect(out).not.toContain('listening on');
      expect(out).not.toContain('first API key');
      expect(out).not.toMatch(/Unhandled|\n\s+at /);
      expect(existsSync(join(dataDir, 'pglite.lock'))).toBe(false);
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      upstream.closeAllConnections();
      upstream.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
