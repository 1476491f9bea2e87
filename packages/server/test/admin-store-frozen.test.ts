import { type PostgresServer, startPostgres } from '@gw/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN, eventually, startGateway, type TestGateway } from './helpers/gateway.js';

let pg: PostgresServer;
let gw: TestGateway;
let dbName: string;

beforeAll(async () => {
  pg = await startPostgres();
  const databaseUrl = await pg.createDatabase();
  dbName = new URL(databaseUrl).pathname.slice(1);
  gw = await startGateway({ databaseUrl });
}, 60_000);

afterAll(async () => {
  pg?.resume();
  await gw?.close();
  await pg?.stop();
});

const listKeys = () => fetch(`${gw.url}/admin/v1/keys`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });

describe('the admin API while PostgreSQL does not answer', () => {
  it('answers 503 store_unavailable within a few seconds of the database freezing, and serves again once it is back', async () => {
    await gw.createKey();
    expect((await listKeys()).status).toBe(200);
    pg.pause();
    try {
      for (const request of [listKeys, () => fetch(`${gw.url}/admin/v1/keys`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })]) {
        const started = performance.now();
        const res = await request();
        const took = performance.now() - started;
        expect(res.status).toBe(503);
        expect(res.headers.get('retry-after')).toBe('1');
        expect(await res.json()).toEqual({
          error: { message: 'The store is unreachable; please retry shortly.', type: 'service_unavailable', code: 'service_unavailable', param: null },
        });
        // Not the client-side query timeout (statement timeout + 2 s) and a ping after it: 14 s.
        expect(took).toBeLessThan(6_000);
      }
    } finally {
      pg.resume();
    }
    await eventually(async () => expect((await listKeys()).status).toBe(200), 10_000);
  }, 60_000);

  it('waits for a database that answers but is slow (a table lock held for seconds) rather than calling it down', async () => {
    const locked = pg.psql('BEGIN; LOCK TABLE api_keys IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(3); COMMIT;', dbName);
    await new Promise((r) => setTimeout(r, 300));
    const started = performance.now();
    const res = await listKeys();
    expect(res.status).toBe(200);
    expect(performance.now() - started).toBeGreaterThan(2_000);
    await locked;
  }, 30_000);
});

/** Runs `create` while PostgreSQL is frozen (its answer: 503), lets the database go on, and waits until it has run what it was sent. */
async function createWhileFrozen(create: () => Promise<{ status: number }>): Promise<void> {
  pg.pause();
  try {
    expect((await create()).status).toBe(503);
  } finally {
    pg.resume();
  }
  const busy = `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle'`;
  await eventually(async () => expect(await pg.psql(busy, dbName)).toBe('0\n'), 10_000);
}

describe('a create whose admin call answered 503 on a frozen database, retried as the answer asks', () => {
  it('leaves exactly one workspace: the one whose id the retry answered', async () => {
    const body = { name: `late-ws-${Date.now()}`, enabledModels: null };
    await createWhileFrozen(() => gw.admin('POST', '/workspaces', body));
    const retry = await gw.admin<{ id: string }>('POST', '/workspaces', body);
    expect(retry.status).toBe(201);
    await eventually(async () => expect(await pg.psql(`SELECT id FROM workspaces WHERE name = '${body.name}'`, dbName)).toBe(`${retry.body.id}\n`), 5_000);
  }, 60_000);

  it('leaves exactly one key listed by GET /keys, the one whose secret the retry answered; none whose secret nobody saw', async () => {
    const body = { name: `late-key-${Date.now()}`, budget: 1 };
    await createWhileFrozen(() => gw.admin('POST', '/keys', body));
    const retry = await gw.createKey(body);
    await eventually(async () => {
      const listed = (await gw.admin<{ data: { id: string; name: string | null; revoked: boolean }[] }>('GET', '/keys?limit=100')).body.data;
      expect(listed.filter((k) => k.name === body.name)).toEqual([expect.objectContaining({ id: retry.id, revoked: false })]);
    }, 5_000);
    expect(await pg.psql(`SELECT count(*) FROM api_keys WHERE name = '${body.name}'`, dbName)).toBe('1\n');
  }, 60_000);
});

/** Read-only from the gateway's next connection on (a standby after a failover, or maintenance): its open ones are ended. */
async function readOnly(on: boolean): Promise<void> {
  await pg.psql(`ALTER DATABASE ${dbName} SET default_transaction_read_only = ${on ? 'on' : 'off'}`);
  await pg.psql(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '${dbName}' AND pid <> pg_backend_pid()`);
}

describe('the admin API while PostgreSQL is read-only', () => {
  it('answers a change with 503 store_unavailable and Retry-After (not a 500), serves reads, and makes the change once it is writable', async () => {
    const kept = await gw.createKey();
    await readOnly(true);
    try {
      const listed = await fetch(`${gw.url}/admin/v1/keys`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
      expect(listed.status).toBe(200);
      for (const [method, path] of [
        ['POST', '/admin/v1/keys'],
        ['POST', `/admin/v1/keys/${kept.id}/revoke`],
      ] as const) {
        const res = await fetch(`${gw.url}${path}`, { method, headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
        expect(res.status).toBe(503);
        expect(res.headers.get('retry-after')).toBe('1');
        expect(((await res.json()) as { error: { code: string } }).error.code).toBe('service_unavailable');
      }
    } finally {
      await readOnly(false);
    }
    expect((await gw.admin('POST', '/keys', {})).status).toBe(201);
  }, 60_000);
});
