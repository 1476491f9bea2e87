import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MIGRATIONS_FOLDER } from '../src/store/index.js';
import { PgliteThread, PgliteThreadError } from '../src/store/pglite-client.js';

let dir: string;
let thread: PgliteThread;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'gw-pglite-thread-'));
  thread = await PgliteThread.open(dir, MIGRATIONS_FOLDER);
  await thread.migrate();
}, 60_000);
afterAll(async () => {
  await thread.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('the embedded database thread', () => {
  it('runs a long query while the event loop keeps turning (PGlite in this thread would hold it for the whole query)', async () => {
    let turns = 0;
    let done = false;
    const spin = () => {
      if (done) return;
      turns++;
      setImmediate(spin);
    };
    setImmediate(spin);
    const rows = await thread.query('SELECT count(*)::int AS n FROM generate_series(1, 2000000)', [], 'array');
    done = true;
    expect(rows).toEqual([[2_000_000]]);
    expect(turns).toBeGreaterThan(20);
  }, 30_000);

  it('answers rows as arrays for drizzle or as objects, and keeps the order calls were sent in', async () => {
    const sent = [1, 2, 3, 4, 5].map((n) => thread.query('SELECT $1::int AS n, $2::text AS t', [n, `v${n}`], n % 2 === 0 ? 'object' : 'array'));
    expect(await Promise.all(sent)).toEqual([[[1, 'v1']], [{ n: 2, t: 'v2' }], [[3, 'v3']], [{ n: 4, t: 'v4' }], [[5, 'v5']]]);
    // Timestamps stay text, as drizzle's PGlite driver reads them.
    expect(await thread.query(`SELECT '2026-01-02T03:04:05Z'::timestamptz AS at`, [], 'array')).toEqual([['2026-01-02 03:04:05+00']]);
  });

  it("reports a failed statement with PostgreSQL's code and goes on answering", async () => {
    const err = await thread.query('SELECT * FROM no_such_table', [], 'array').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PgliteThreadError);
    expect((err as PgliteThreadError).code).toBe('42P01');
    expect(await thread.query('SELECT 1 AS one', [], 'object')).toEqual([{ one: 1 }]);
  });

  it('starts a new thread on the same files when the thread dies; what was committed is still there', async () => {
    await thread.query('CREATE TABLE IF NOT EXISTS survive (n int)', [], 'object');
    await thread.query('INSERT INTO survive VALUES (42)', [], 'object');
    const inFlight = thread.query('SELECT count(*)::int FROM generate_series(1, 3000000)', [], 'array');
    await thread.crashForTest();
    await expect(inFlight).rejects.toThrow(/stopped/);
    await expect(thread.query('SELECT 1', [], 'array')).rejects.toThrow(/restarting/);
    let rows: unknown[] | null = null;
    for (let i = 0; i < 200 && rows === null; i++) {
      rows = await thread.query('SELECT n FROM survive', [], 'array').catch(() => null);
      if (rows === null) await new Promise((r) => setTimeout(r, 100));
    }
    expect(rows).toEqual([[42]]);
    expect(thread.restartCount).toBe(1);
  }, 60_000);

  it('makes again a database whose creation was cut short (its files half written), rather than failing to open them', async () => {
    const otherDir = mkdtempSync(join(tmpdir(), 'gw-pglite-thread-'));
    const dbDir = join(otherDir, 'pglite');
    try {
      // What a kill during the first start leaves: the marker the creation writes first, and part of a cluster.
      mkdirSync(join(dbDir, 'base'), { recursive: true });
      writeFileSync(join(dbDir, 'PG_VERSION'), '17\n');
      writeFileSync(`${dbDir}.creating`, '');
      const reopened = await PgliteThread.open(dbDir, MIGRATIONS_FOLDER);
      try {
        expect(reopened.origin).toBe('template');
        await reopened.migrate();
        expect(await reopened.query('SELECT count(*)::int FROM usage_records', [], 'array')).toEqual([[0]]);
        expect(existsSync(`${dbDir}.creating`)).toBe(false);
      } finally {
        await reopened.close();
      }
    } finally {
      rmSync(otherDir, { recursive: true, force: true });
    }
  }, 60_000);

  it("keeps drizzle's migration journal: a second migrate applies nothing again", async () => {
    const journal = JSON.parse(readFileSync(join(MIGRATIONS_FOLDER, 'meta', '_journal.json'), 'utf8')) as { entries: unknown[] };
    const count = () => thread.query('SELECT count(*)::int FROM drizzle.__drizzle_migrations', [], 'array');
    expect(await count()).toEqual([[journal.entries.length]]);
    await thread.migrate();
    expect(await count()).toEqual([[journal.entries.length]]);
  });

  it('applies the pending migrations all or none: a failing statement leaves no table and no journal row behind', async () => {
    const otherDir = mkdtempSync(join(tmpdir(), 'gw-pglite-thread-'));
    const migrations = join(otherDir, 'migrations');
    mkdirSync(join(migrations, 'meta'), { recursive: true });
    const entry = (idx: number, tag: string) => ({ idx, version: '7', when: 1_800_000_000_000 + idx, tag, breakpoints: true });
    writeFileSync(
      join(migrations, 'meta', '_journal.json'),
      JSON.stringify({ version: '7', dialect: 'postgresql', entries: [entry(0, '0000_a'), entry(1, '0001_b')] }),
    );
    writeFileSync(join(migrations, '0000_a.sql'), 'CREATE TABLE a_ok (n int);');
    writeFileSync(join(migrations, '0001_b.sql'), 'CREATE TABLE b_half (n int);\n--> statement-breakpoint\nSELECT * FROM no_such_table;');
    mkdirSync(join(otherDir, 'db'));
    const other = await PgliteThread.open(join(otherDir, 'db'), migrations);
    try {
      await expect(other.migrate()).rejects.toThrow(/no_such_table/);
      const tables = () => other.query("SELECT tablename FROM pg_tables WHERE tablename IN ('a_ok', 'b_half') ORDER BY 1", [], 'array');
      expect(await tables()).toEqual([]);
      expect(await other.query('SELECT count(*)::int FROM drizzle.__drizzle_migrations', [], 'array')).toEqual([[0]]);
      writeFileSync(join(migrations, '0001_b.sql'), 'CREATE TABLE b_half (n int);');
      await other.migrate();
      expect(await tables()).toEqual([['a_ok'], ['b_half']]);
      expect(await other.query('SELECT count(*)::int FROM drizzle.__drizzle_migrations', [], 'array')).toEqual([[2]]);
    } finally {
      await other.close();
      rmSync(otherDir, { recursive: true, force: true });
    }
  }, 60_000);

  it('refuses calls once closed, with a clear error', async () => {
    const otherDir = mkdtempSync(join(tmpdir(), 'gw-pglite-thread-'));
    const other = await PgliteThread.open(otherDir, MIGRATIONS_FOLDER);
    await other.close();
    await expect(other.query('SELECT 1', [], 'array')).rejects.toThrow(/closed/);
    rmSync(otherDir, { recursive: true, force: true });
  }, 60_000);

  it("creates a new database from the build's template, a working cluster that a later start finds there", async () => {
    // The build (npm run build, which the tests' run starts with) dumps the template; beforeAll opened an empty directory.
    expect(thread.origin).toBe('template');
    const otherDir = mkdtempSync(join(tmpdir(), 'gw-pglite-thread-'));
    try {
      const first = await PgliteThread.open(otherDir, MIGRATIONS_FOLDER);
      expect(first.origin).toBe('template');
      await first.migrate();
      await first.query('INSERT INTO settings (name, value) VALUES ($1, $2)', ['template-check', '"kept"'], 'object');
      await first.close();
      const again = await PgliteThread.open(otherDir, MIGRATIONS_FOLDER);
      expect(again.origin).toBe('existing');
      expect(await again.query('SELECT value FROM settings WHERE name = $1', ['template-check'], 'array')).toEqual([['"kept"']]);
      // The template's cluster is the one PostgreSQL's initdb makes: its own databases, UTF-8, the C collation PGlite uses.
      expect(await again.query("SELECT pg_encoding_to_char(encoding) FROM pg_database WHERE datname = 'postgres'", [], 'array')).toEqual([['UTF8']]);
      await again.close();
    } finally {
      rmSync(otherDir, { recursive: true, force: true });
    }
  }, 60_000);
});
