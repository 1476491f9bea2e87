import { type PostgresServer, startPostgres } from '@gw/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN, startGateway, type TestGateway } from './helpers/gateway.js';

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
  await gw?.close();
  await pg?.stop();
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
