import { spawnSync } from 'node:child_process';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const main = fileURLToPath(new URL('../dist/main.js', import.meta.url));
const run = (...args: string[]) => spawnSync(process.execPath, [main, ...args], { encoding: 'utf8', timeout: 10_000 });

describe('node packages/simulator/dist/main.js', () => {
  it('a port or latency scale that is no number stops with exit 2 naming the flag, where NaN ports threw and NaN timings ran', () => {
    for (const [flag, value] of [
      ['--port', 'abc'],
      ['--port', '65534'],
      ['--latency-scale', 'fast'],
    ] as const) {
      const r = run(flag, value);
      expect(r.status, `${flag} ${value}`).toBe(2);
      expect(r.stderr).toContain(`${flag} "${value}": expected`);
      expect(r.stderr).not.toContain('    at ');
    }
  });

  it('a port already taken (9100 is node_exporter’s too) stops with exit 1 naming it, without a stack trace', async () => {
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const port = (taken.address() as { port: number }).port;
    try {
      // The third provider's port: the two before it are free (or not; either way the start fails and names a port).
      const r = run('--port', String(port - 2));
      expect(r.status).toBe(1);
      expect(r.stderr).toMatch(/^cannot listen on 127\.0\.0\.1:\d+: /);
      expect(r.stderr).not.toContain('    at ');
    } finally {
      taken.close();
    }
  });
});
