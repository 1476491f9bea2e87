import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, startPostgres } from '@gw/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway } from './helpers/gateway.js';

let pg: PostgresServer;
let sim: Simulator;

beforeAll(async () => {
  [pg, sim] = await Promise.all([startPostgres(), startSimulator({ latencyScale: 0 })]);
}, 120_000);
afterAll(async () => {
  await sim?.close();
  await pg?.stop();
});

describe('the root secret (GW_SECRET, else generated on the first start and kept in the store)', () => {
  it('is generated once for a store: instances starting together and one started later all hold the same, and it is kept', async () => {
    const db = await pg.createDatabase();
    const together = await Promise.all([startGateway({ sim, databaseUrl: db }), startGateway({ sim, databaseUrl: db })]);
    const [a, b] = together.map((g) => g.gateway.services.secret);
    expect(a).toMatch(/^[A-Za-z0-9_-]{32,}$/);
    expect(b).toBe(a);
    expect(await together[0]?.gateway.services.store.settings.get('root_secret')).toBe(a);
    await Promise.all(together.map((g) => g.close()));
    const later = await startGateway({ sim, databaseUrl: db });
    try {
      expect(later.gateway.services.secret).toBe(a);
    } finally {
      await later.close();
    }
  }, 60_000);

  it('differs between stores, embedded too', async () => {
    const [one, two] = await Promise.all([startGateway({ sim }), startGateway({ sim, databaseUrl: await pg.createDatabase() })]);
    try {
      expect(one.gateway.services.secret).toMatch(/^[A-Za-z0-9_-]{32,}$/);
      expect(one.gateway.services.secret).not.toBe(two.gateway.services.secret);
      expect(await one.gateway.services.store.settings.get('root_secret')).toBe(one.gateway.services.secret);
    } finally {
      await Promise.all([one.close(), two.close()]);
    }
  }, 60_000);

  it('GW_SECRET is used as given and nothing is generated in the store', async () => {
    const given = 'an-operator-secret-of-at-least-32-chars';
    const gw = await startGateway({ sim, databaseUrl: await pg.createDatabase(), env: { GW_SECRET: given } });
    try {
      expect(gw.gateway.services.secret).toBe(given);
      expect(await gw.gateway.services.store.settings.get('root_secret')).toBeNull();
    } finally {
      await gw.close();
    }
  }, 60_000);
});
