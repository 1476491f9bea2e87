import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { MAIN } from './helpers/process.js';

/** A Node older than 24 on this machine's PATH (the fresh machine of INTERFACES.md has Node 20), outside the project. */
function olderNode(): string | undefined {
  const found = spawnSync('which', ['-a', 'node'], { encoding: 'utf8', env: { PATH: process.env.PATH ?? '' } }).stdout.split('\n');
  return found.find((path) => {
    if (path === '' || path.includes('node_modules')) return false;
    const version = spawnSync(path, ['-p', 'process.versions.node'], { encoding: 'utf8' }).stdout.trim();
    return Number(version.split('.')[0]) < 24;
  });
}

describe('the gateway started on a Node older than 24', () => {
  it('stops at once with exit 1 and says which Node it needs, rather than fail inside a dependency', () => {
    const node = olderNode();
    // The machine's own Node is what a hand start without npm would use; without one there is nothing to check with.
    expect(node, 'no Node older than 24 on PATH to start the gateway with').toBeDefined();
    const run = spawnSync(node as string, [MAIN], { encoding: 'utf8', env: { PATH: process.env.PATH ?? '', PORT: '0' }, timeout: 20_000 });
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(/^gw: needs Node >= 24, and this is v\d+\.\d+\.\d+\. Start it with `npm start`/);
    expect(run.stderr).not.toMatch(/TypeError/);
  });
});
