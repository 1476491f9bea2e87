import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStore } from '../src/store/open.js';

let root: string;
/** A 10 MB tmpfs is a real full disk for a new embedded database; only where this process may mount one (root). */
let mounted = false;

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'gw-embedded-disk-full-'));
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=10m', 'tmpfs', root], { stdio: 'ignore' });
    mounted = true;
  } catch {
    // Not permitted here: the test is skipped.
  }
});

afterAll(() => {
  if (mounted) execFileSync('umount', [root], { stdio: 'ignore' });
  rmSync(root, { recursive: true, force: true });
});

describe('the embedded database on a disk too full to create it', () => {
  it('fails with the file system error by name, not "[object Object]"', async (ctx) => {
    if (!mounted) ctx.skip();
    const opened = openStore({ dataDir: join(root, 'data') });
    await expect(opened).rejects.toThrow(/ENOSPC: no space left on device/);
    await expect(opened).rejects.not.toThrow(/object Object/);
  }, 60_000);
});
