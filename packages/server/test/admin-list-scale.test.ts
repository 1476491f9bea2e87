import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type PostgresServer, startPostgres } from '@gw/testkit';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';
import { spawnGateway } from './helpers/process.js';

// An operator's store: tens of thousands of keys over a few workspaces, written straight into PostgreSQL (the admin
// API makes about 450 a second). The rows a page reads are counted (PostgreSQL's own statistics), not timed.
const KEYS = 30_000;
const WORKSPACES = 3;
const PAGES = 5;

let postgres: PostgresServer;
let gw: TestGateway;
let db: pg.Client;
let databaseUrl: string;

beforeAll(async () => {
  postgres = await startPostgres();
  databaseUrl = await postgres.createDatabase();
  gw = await startGateway({ databaseUrl });
  db = new pg.Client(databaseUrl);
  await db.connect();
  await db.query(
    `INSERT INTO workspaces (id, name, created_at) SELECT 'ws_scale' || i, 'scale', now() - i * interval '1 s' FROM generate_series(1, ${WORKSPACES}) i`,
  );
  await db.query(
    `INSERT INTO api_keys (id, workspace_id, hash, rate_limit_rpm, created_at)
     SELECT 'key_scale' || i, 'ws_scale' || (i % ${WORKSPACES} + 1), md5(i::text), 60, now() - i * interval '1 ms' FROM generate_series(1, ${KEYS}) i`,
  );
  await db.query('ANALYZE api_keys; ANALYZE workspaces');
}, 120_000);

afterAll(async () => {
  await db?.end();
  await gw?.close();
  await postgres?.stop();
});

type Page = { data: { id: string }[]; hasMore: boolean };

/** Scans of api_keys from its first row and the rows they read, and index scans of it, as PostgreSQL's statistics have them. */
async function reads(): Promise<{ seqScans: number; seqRows: number; indexScans: number }> {
  const { rows } = await db.query('SELECT seq_scan::int AS n, seq_tup_read::int AS s, idx_scan::int AS i FROM pg_stat_user_tables WHERE relname = $1', [
    'api_keys',
  ]);
  return { seqScans: rows[0].n, seqRows: rows[0].s, indexScans: rows[0].i };
}

describe('the admin key list over tens of thousands of keys', () => {
  it('reads each page from an index rather than the whole table, listing all keys and one workspace’s', async () => {
    const before = await reads();
    let after: string | undefined;
    const seen = new Set<string>();
    for (let i = 0; i < PAGES; i++) {
      const all = await gw.admin<Page>('GET', `/keys?limit=100${after ? `&after=${after}` : ''}`);
      expect(all.status).toBe(200);
      for (const k of all.body.data) seen.add(k.id);
      after = all.body.data.at(-1)?.id;
      const one = await gw.admin<Page>('GET', `/keys?workspaceId=ws_scale2&limit=100&after=key_scale${1 + i * 300}`);
      expect(one.body.data.length).toBe(100);
    }
    // Newest first: the keys made last in the inserts' time order (key_scale1 is the newest), none repeated.
    expect(seen.size).toBe(PAGES * 100);
    expect(seen.has('key_scale1') && seen.has(`key_scale${PAGES * 100}`)).toBe(true);
    // PostgreSQL publishes a backend's counts within about a second of its queries.
    let now = before;
    await eventually(async () => {
      now = await reads();
      expect(now.indexScans - before.indexScans).toBeGreaterThanOrEqual(PAGES * 2);
    }, 10_000);
    // Sorting the whole table read all 30,000 rows for each of the 10 pages.
    expect(now.seqRows - before.seqRows).toBeLessThan(KEYS);
  }, 60_000);

  it('starts another instance on that database without reading every key', async () => {
    const before = await reads();
    const dataDir = mkdtempSync(join(tmpdir(), 'gw-list-scale-'));
    const other = await spawnGateway({ DATABASE_URL: databaseUrl, GW_DATA_DIR: dataDir });
    try {
      other.child.kill('SIGTERM');
      expect(await other.exited).toBe(0);
      // Its check for a first key to make (is there any key?) counted the keys: a scan of all 30,000 rows.
      await eventually(async () => {
        const now = await reads();
        expect(now.seqScans + now.indexScans).toBeGreaterThan(before.seqScans + before.indexScans);
      }, 10_000);
      expect((await reads()).seqRows - before.seqRows).toBeLessThan(KEYS);
    } finally {
      other.child.kill('SIGKILL');
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 60_000);

  it('skips and repeats no key while keys are created and revoked between its pages', async () => {
    const made: string[] = [];
    const ids = new Set<string>();
    let after: string | undefined;
    for (;;) {
      const page = await gw.admin<Page>('GET', `/keys?workspaceId=ws_scale1&limit=100${after ? `&after=${after}` : ''}`);
      for (const k of page.body.data) {
        expect(ids.has(k.id)).toBe(false);
        ids.add(k.id);
      }
      // A new key is newer than every listed one: it is not on a later page. A revoked key stays listed.
      made.push((await gw.createKey({ workspaceId: 'ws_scale1' })).id);
      await gw.admin('POST', `/keys/${[...ids][ids.size >> 1]}/revoke`);
      if (!page.body.hasMore) break;
      after = page.body.data.at(-1)?.id;
    }
    const { rows } = await db.query('SELECT id FROM api_keys WHERE workspace_id = $1 AND NOT (id = ANY($2))', ['ws_scale1', made]);
    expect(ids.size).toBe(rows.length);
    for (const r of rows) expect(ids.has(r.id)).toBe(true);
  }, 60_000);
});
