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
