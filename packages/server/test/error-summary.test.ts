import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { errorSummary } from '../src/lib/error-summary.js';
import { registerSecret } from '../src/lib/redact.js';
import { openStore } from '../src/store/index.js';

describe('errors in log lines', () => {
  it("a failed query's line gives its reason and the statement's first words, not the statement and its rows", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-error-summary-'));
    const store = await openStore({ dataDir: dir });
    try {
      await store.migrate();
      // A real failure of the store's own statement: numeric(24, 12) holds 12 digits before the point.
      const err = await store.workspaces
        .create({ id: 'ws_overflow', name: 'secret-looking-name-0123', enabledModels: null, budget: 1e13 })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(Error);
      const summary = errorSummary(err);
      expect(summary.message).toMatch(/^database query failed \(insert into "workspaces"/);
      expect(summary.message).toContain('overflow');
      expect(JSON.stringify(summary)).not.toContain('secret-looking-name-0123');
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('takes out of the line what an unexpected error was given: a known secret, a URL password, a client key', () => {
    registerSecret('prov-Secret-9f8e7d6c5b4a');
    const err = new Error('upstream said: bad key prov-Secret-9f8e7d6c5b4a; retried redis://gw:hunter2pass@cache:6379 for gw_live_AbCdEfGh12345678IjKl');
    const line = JSON.stringify(errorSummary(err));
    for (const secret of ['prov-Secret', 'hunter2pass', 'gw_live_AbCdEfGh']) expect(line).not.toContain(secret);
    expect(errorSummary(err).message).toContain('upstream said: bad key [redacted]');
    expect(errorSummary(err).stack).toContain('[redacted]');
    expect(errorSummary('thrown text with prov-Secret-9f8e7d6c5b4a').message).toBe('thrown text with [redacted]');
  });

  it('any other error keeps its message and code', () => {
    const err = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' });
    expect(errorSummary(err)).toMatchObject({ message: 'connect ECONNREFUSED 127.0.0.1:1', code: 'ECONNREFUSED' });
    expect(errorSummary('plain')).toEqual({ message: 'plain' });
  });
});
