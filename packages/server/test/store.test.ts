import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type PostgresServer, requireBinary, startPostgres } from '@gw/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureFirstKey } from '../src/auth/first-key.js';
import { LeaseLedger } from '../src/limits/lease-ledger.js';
import { openStore, type Store, type UsageRecord } from '../src/store/index.js';

const postgresOk = requireBinary('postgres', 'packages/server store tests');

// One throwaway PostgreSQL for this file; each suite gets its own database.
let server: PostgresServer | undefined;
const getServer = async () => {
  server ??= await startPostgres();
  return server;
};
afterAll(async () => {
  await server?.stop();
});

const tempDirs: string[] = [];
afterAll(() => {
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
});
const tempDir = () => {
  const dir = mkdtempSync(join(tmpdir(), 'gw-store-test-'));
  tempDirs.push(dir);
  return dir;
};

interface Driver {
  name: 'pglite' | 'postgres';
  enabled: boolean;
  /** Opens a store on a fresh, empty database. */
  fresh(): Promise<Store>;
}

const drivers: Driver[] = [
  { name: 'pglite', enabled: true, fresh: () => openStore({ dataDir: tempDir() }) },
  {
    name: 'postgres',
    enabled: postgresOk,
    fresh: async () => openStore({ databaseUrl: await (await getServer()).createDatabase(), dataDir: tempDir() }),
  },
];

let seq = 0;
const uid = (prefix: string) => `${prefix}_${Date.now().toString(36)}_${++seq}`;

function usage(overrides: Partial<UsageRecord> & Pick<UsageRecord, 'requestId' | 'keyId'>): UsageRecord {
  return {
    workspaceId: null,
    kind: 'chat',
    model: 'mistral/small',
    provider: 'alpha',
    promptTokens: 10,
    completionTokens: 5,
    totalTokens: 15,
    units: 0,
    cost: 0.000005,
    latencyMs: 120,
    status: 200,
    errorCode: null,
    streamed: false,
    createdAt: new Date('2026-01-01T00:00:00.000Z'),
    ...overrides,
  };
}

for (const driver of drivers) {
  describe.skipIf(!driver.enabled)(`store on ${driver.name}`, () => {
    let store: Store;
    beforeAll(async () => {
      store = await driver.fresh();
      await store.migrate();
    });
    afterAll(async () => {
      await store?.close();
    });

    it('reports its kind and answers ping', async () => {
      expect(store.kind).toBe(driver.name);
      await store.ping();
    });

    it('migrate() a second time is a no-op and keeps the data', async () => {
      await store.settings.setIfAbsent('before-remigrate', 'kept');
      await store.migrate();
      await store.migrate();
      expect(await store.settings.get('before-remigrate')).toBe('kept');
    });

    it('lists keys and workspaces newest first, a page after a given row, keys of one workspace apart', async () => {
      const ws = await store.workspaces.create({ id: uid('ws'), name: 'Paged', enabledModels: null, budget: null });
      const ids: string[] = [];
      for (let i = 0; i < 5; i++) {
        const key = await store.keys.create({ id: uid('key'), name: `k${i}`, workspaceId: ws.id, hash: uid('hash'), rateLimitRpm: 60, budget: null });
        ids.push(key.id);
      }
      const newestFirst = [...ids].reverse();
      const first = await store.keys.list({ limit: 2, workspaceId: ws.id });
      expect(first.map((k) => k.id)).toEqual(newestFirst.slice(0, 2));
      const second = await store.keys.list({ limit: 2, workspaceId: ws.id, after: first[1]?.id as string });
      expect(second.map((k) => k.id)).toEqual(newestFirst.slice(2, 4));
      const rest = await store.keys.list({ limit: 10, workspaceId: ws.id, after: second[1]?.id as string });
      expect(rest.map((k) => k.id)).toEqual(newestFirst.slice(4));
      // Another workspace's key and a key of none are not in this workspace's list, and are in the whole list.
      const other = await store.keys.create({ id: uid('key'), name: null, workspaceId: null, hash: uid('hash'), rateLimitRpm: 60, budget: null });
      expect((await store.keys.list({ limit: 100, workspaceId: ws.id })).map((k) => k.id)).not.toContain(other.id);
      expect((await store.keys.list({ limit: 1 })).map((k) => k.id)).toEqual([other.id]);
      expect(await store.keys.list({ limit: 10, after: 'key_none' })).toEqual([]);
      const newer = await store.workspaces.create({ id: uid('ws'), name: 'Newer', enabledModels: null, budget: 3 });
      const wss = await store.workspaces.list({ limit: 2 });
      expect(wss.map((w) => w.id)).toEqual([newer.id, ws.id]);
      expect((await store.workspaces.list({ limit: 1, after: newer.id })).map((w) => w.id)).toEqual([ws.id]);
    });

    it('creates and gets workspaces', async () => {
      const id = uid('ws');
      const created = await store.workspaces.create({ id, name: 'Team A', enabledModels: ['mistral/small'], budget: 12.5 });
      expect(created).toEqual({
        id,
        name: 'Team A',
        enabledModels: ['mistral/small'],
        budget: 12.5,
        budgetSeq: 0,
        spent: 0,
        createdAt: expect.any(Date),
      });
      expect(Math.abs(created.createdAt.getTime() - Date.now())).toBeLessThan(60_000);
      expect(await store.workspaces.get(id)).toEqual(created);

      const open = await store.workspaces.create({ id: uid('ws'), name: 'All models', enabledModels: null, budget: null });
      expect(open.enabledModels).toBeNull();
      expect(open.budget).toBeNull();
      expect(await store.workspaces.get('ws_missing')).toBeNull();
    });

    it('creates keys and finds them by id and by hash', async () => {
      const ws = await store.workspaces.create({ id: uid('ws'), name: 'W', enabledModels: null, budget: null });
      const id = uid('key');
      const hash = `${id}-hash`;
      const key = await store.keys.create({ id, name: 'ci', workspaceId: ws.id, hash, rateLimitRpm: 60, budget: null });
      expect(key).toEqual({
        id,
        name: 'ci',
        workspaceId: ws.id,
        hash,
        rateLimitRpm: 60,
        budget: null,
        budgetSeq: 0,
        spent: 0,
        revoked: false,
        createdAt: expect.any(Date),
      });
      expect(await store.keys.getById(id)).toEqual(key);
      expect(await store.keys.getByHash(hash)).toEqual(key);
      expect(await store.keys.getByHash('no-such-hash')).toBeNull();
      expect(await store.keys.getById('no-such-key')).toBeNull();

      const bare = await store.keys.create({ id: uid('key'), name: null, workspaceId: null, hash: uid('h'), rateLimitRpm: 5, budget: 1 });
      expect(bare.name).toBeNull();
      expect(bare.workspaceId).toBeNull();
      expect(bare.budget).toBe(1);
    });

    it('rejects a second key with the same hash', async () => {
      const hash = uid('dup');
      await store.keys.create({ id: uid('key'), name: null, workspaceId: null, hash, rateLimitRpm: 60, budget: null });
      await expect(store.keys.create({ id: uid('key'), name: null, workspaceId: null, hash, rateLimitRpm: 60, budget: null })).rejects.toThrow();
    });

    it('updates and revokes keys', async () => {
      const id = uid('key');
      await store.keys.create({ id, name: 'k', workspaceId: null, hash: uid('h'), rateLimitRpm: 60, budget: null });

      const a = await store.keys.update(id, { rateLimitRpm: 120 });
      expect(a).toMatchObject({ id, rateLimitRpm: 120, budget: null, budgetSeq: 0 });
      // Every change of the budget counts, its removal included (leases taken under an earlier one give room back).
      const b = await store.keys.update(id, { budget: 3.25 });
      expect(b).toMatchObject({ rateLimitRpm: 120, budget: 3.25, budgetSeq: 1 });
      const c = await store.keys.update(id, { budget: null });
      expect(c).toMatchObject({ rateLimitRpm: 120, budget: null, budgetSeq: 2 });
      expect(await store.keys.update(id, {})).toEqual(c);
      expect(await store.keys.update('no-such-key', { rateLimitRpm: 1 })).toBeNull();

      const revoked = await store.keys.revoke(id);
      expect(revoked).toMatchObject({ id, revoked: true, rateLimitRpm: 120 });
      expect((await store.keys.getById(id))?.revoked).toBe(true);
      expect(await store.keys.revoke('no-such-key')).toBeNull();
    });

    it('deletes a key, and a workspace only while no key refers to it', async () => {
      const ws = await store.workspaces.create({ id: uid('ws'), name: 'Undone', enabledModels: null, budget: null });
      const key = await store.keys.create({ id: uid('key'), name: null, workspaceId: ws.id, hash: uid('h'), rateLimitRpm: 60, budget: null });
      expect(await store.workspaces.deleteUnused(ws.id)).toBe(false);
      expect(await store.workspaces.get(ws.id)).not.toBeNull();
      expect(await store.keys.delete(key.id)).toBe(true);
      expect(await store.keys.getById(key.id)).toBeNull();
      expect(await store.keys.delete(key.id)).toBe(false);
      expect(await store.workspaces.deleteUnused(ws.id)).toBe(true);
      expect(await store.workspaces.get(ws.id)).toBeNull();
      expect(await store.workspaces.deleteUnused(ws.id)).toBe(false);
    });

    it('counts keys', async () => {
      const before = await store.keys.count();
      await store.keys.create({ id: uid('key'), name: null, workspaceId: null, hash: uid('h'), rateLimitRpm: 60, budget: null });
      await store.keys.create({ id: uid('key'), name: null, workspaceId: null, hash: uid('h'), rateLimitRpm: 60, budget: null });
      expect(await store.keys.count()).toBe(before + 2);
      const fresh = await driver.fresh();
      try {
        await fresh.migrate();
        expect(await fresh.keys.count()).toBe(0);
      } finally {
        await fresh.close();
      }
    });

    it('adds spent in exact decimal arithmetic', async () => {
      const ws = await store.workspaces.create({ id: uid('ws'), name: 'W', enabledModels: null, budget: 1 });
      const key = await store.keys.create({ id: uid('key'), name: null, workspaceId: ws.id, hash: uid('h'), rateLimitRpm: 60, budget: null });
      const row = (cost: number, workspaceId: string | null = ws.id) => usage({ requestId: uid('req'), keyId: key.id, workspaceId, cost });
      for (let i = 0; i < 10; i++) await store.usage.insertMany([row(0.1)]);
      await store.usage.insertMany([row(0.0000002, null)]); // one token at 0.20 EUR / 1M
      // Ten binary 0.1s add up to 0.9999999999999999; numeric gives exactly 1.
      expect((await store.workspaces.get(ws.id))?.spent).toBe(1);
      expect((await store.keys.getById(key.id))?.spent).toBe(1.0000002);
      await expect(store.usage.insertMany([row(Number.NaN)])).rejects.toThrow(RangeError);
      await store.usage.insertMany([usage({ requestId: uid('req'), keyId: uid('key'), cost: 1 })]); // no key row, no error
      expect((await store.keys.getById(key.id))?.spent).toBe(1.0000002);
    });

    it('50 concurrent inserts add their spend exactly', async () => {
      const ws = await store.workspaces.create({ id: uid('ws'), name: 'W', enabledModels: null, budget: null });
      const key = await store.keys.create({ id: uid('key'), name: null, workspaceId: ws.id, hash: uid('h'), rateLimitRpm: 60, budget: null });
      const other = await store.keys.create({ id: uid('key'), name: null, workspaceId: ws.id, hash: uid('h'), rateLimitRpm: 60, budget: null });
      await Promise.all(
        Array.from({ length: 50 }, (_, i) =>
          Promise.all([
            store.usage.insertMany([usage({ requestId: uid('req'), keyId: key.id, workspaceId: ws.id, cost: 0.01 * (i + 1) })]),
            store.usage.insertMany([usage({ requestId: uid('req'), keyId: other.id, workspaceId: ws.id, cost: 0.25 })]),
          ]),
        ),
      );
      expect((await store.keys.getById(key.id))?.spent).toBe(12.75); // 0.01 * (1 + … + 50)
      expect((await store.keys.getById(other.id))?.spent).toBe(12.5);
      expect((await store.workspaces.get(ws.id))?.spent).toBe(25.25);
    });

    it('concurrent inserts that touch the same keys and workspaces in different orders all land, with exact spend', async () => {
      const wss = await Promise.all([0, 1].map(() => store.workspaces.create({ id: uid('ws'), name: 'W', enabledModels: null, budget: null })));
      const keys = await Promise.all(
        [0, 1, 2, 3].map((i) =>
          store.keys.create({ id: uid('key'), name: null, workspaceId: wss[i % 2]?.id ?? null, hash: uid('h'), rateLimitRpm: 60, budget: null }),
        ),
      );
      // Each batch names every key, half of them in reverse: as several gateway instances flushing at once would.
      await Promise.all(
        Array.from({ length: 40 }, (_, n) => {
          const order = n % 2 === 0 ? keys : [...keys].reverse();
          return store.usage.insertMany(order.map((k) => usage({ requestId: uid('req'), keyId: k.id, workspaceId: k.workspaceId, cost: 0.5 })));
        }),
      );
      for (const k of keys) expect((await store.keys.getById(k.id))?.spent).toBe(20);
      for (const w of wss) expect((await store.workspaces.get(w.id))?.spent).toBe(40);
    });

    it('insertMany ignores a repeated requestId, within a batch and across batches', async () => {
      const keyId = uid('key');
      const r1 = uid('req');
      const r2 = uid('req');
      await store.usage.insertMany([
        usage({ requestId: r1, keyId, model: 'first' }),
        usage({ requestId: r2, keyId }),
        usage({ requestId: r1, keyId, model: 'repeat-in-batch' }),
      ]);
      await store.usage.insertMany([usage({ requestId: r1, keyId, model: 'repeat-later' })]);
      await store.usage.insertMany([]);
      const rows = await store.usage.list({ keyId });
      expect(rows).toHaveLength(2);
      expect(rows.find((r) => r.requestId === r1)?.model).toBe('first');
    });

    it('insertMany round-trips every field', async () => {
      const record = usage({
        requestId: uid('req'),
        keyId: uid('key'),
        workspaceId: uid('ws'),
        kind: 'audio',
        provider: null,
        units: 12.5,
        cost: 0.0123456789,
        status: 402,
        errorCode: 'budget_exceeded',
        streamed: true,
        createdAt: new Date('2026-02-03T04:05:06.789Z'),
      });
      await store.usage.insertMany([record]);
      expect(await store.usage.list({ requestId: record.requestId })).toEqual([record]);
    });

    it('insertMany keeps text with quotes, commas, line breaks and empty strings as it is', async () => {
      const record = usage({
        requestId: uid('req'),
        keyId: uid('key'),
        model: 'a "quoted", model\nwith a line break, a tab\t and \\N',
        provider: 'p,q',
        errorCode: '',
      });
      await store.usage.insertMany([record, usage({ requestId: uid('req'), keyId: record.keyId, model: '""' })]);
      const rows = await store.usage.list({ keyId: record.keyId });
      expect(rows.find((r) => r.requestId === record.requestId)).toEqual(record);
      expect(rows.map((r) => r.model).sort()).toEqual(['""', record.model].sort());
    });

    it('insertMany adds each cost to the spend as the column stores it (12 decimals, half away from zero)', async () => {
      const key = await store.keys.create({ id: uid('key'), name: 'k', workspaceId: null, hash: uid('hash'), rateLimitRpm: 60, budget: null });
      await store.usage.insertMany([
        usage({ requestId: uid('req'), keyId: key.id, cost: 5e-13 }),
        usage({ requestId: uid('req'), keyId: key.id, cost: 5e-13 }),
        usage({ requestId: uid('req'), keyId: key.id, cost: 4e-13 }),
        usage({ requestId: uid('req'), keyId: key.id, cost: 1.0000000000005 }),
      ]);
      const stored = (await store.usage.list({ keyId: key.id })).map((r) => r.cost).sort((a, b) => a - b);
      expect(stored).toEqual([0, 1e-12, 1e-12, 1.000000000001]);
      expect((await store.keys.getById(key.id))?.spent).toBe(1.000000000003);
    });

    it('insertMany adds the cost of the rows it stored to their key and workspace, once', async () => {
      const ws = await store.workspaces.create({ id: uid('ws'), name: 'W', enabledModels: null, budget: null });
      const key = await store.keys.create({ id: uid('key'), name: null, workspaceId: ws.id, hash: uid('h'), rateLimitRpm: 60, budget: null });
      const solo = await store.keys.create({ id: uid('key'), name: null, workspaceId: null, hash: uid('h'), rateLimitRpm: 60, budget: null });
      const first = uid('req');
      const inWs = { keyId: key.id, workspaceId: ws.id };
      await store.usage.insertMany([
        usage({ requestId: first, ...inWs, cost: 0.1 }),
        usage({ requestId: uid('req'), ...inWs, cost: 0.2 }),
        usage({ requestId: uid('req'), ...inWs, cost: 0 }),
        usage({ requestId: uid('req'), keyId: solo.id, cost: 0.0000002 }),
      ]);
      // A batch written again after its answer was lost, with one new row: only the new row adds.
      await store.usage.insertMany([usage({ requestId: first, ...inWs, cost: 0.1 }), usage({ requestId: uid('req'), ...inWs, cost: 0.05 })]);
      expect((await store.keys.getById(key.id))?.spent).toBe(0.35);
      expect((await store.workspaces.get(ws.id))?.spent).toBe(0.35);
      expect((await store.keys.getById(solo.id))?.spent).toBe(0.0000002);
      expect(await store.usage.list({ keyId: key.id })).toHaveLength(4);
    });

    it('insertMany takes batches bigger than one statement allows', async () => {
      const keyId = uid('key');
      const records = Array.from({ length: 4_500 }, (_, i) => usage({ requestId: `${keyId}-${i}`, keyId }));
      await store.usage.insertMany(records);
      expect(await store.usage.list({ keyId, limit: 10_000 })).toHaveLength(4_500);
    });

    it('lists usage with filters, newest first', async () => {
      const keyA = uid('key');
      const keyB = uid('key');
      const ws = uid('ws');
      const at = (minute: number) => new Date(Date.UTC(2026, 2, 1, 12, minute));
      await store.usage.insertMany([
        usage({ requestId: uid('req'), keyId: keyA, workspaceId: ws, createdAt: at(0) }),
        usage({ requestId: uid('req'), keyId: keyA, workspaceId: ws, createdAt: at(10) }),
        usage({ requestId: uid('req'), keyId: keyA, workspaceId: null, createdAt: at(20) }),
        usage({ requestId: uid('req'), keyId: keyB, workspaceId: ws, createdAt: at(30) }),
      ]);

      const byKey = await store.usage.list({ keyId: keyA });
      expect(byKey.map((r) => r.createdAt)).toEqual([at(20), at(10), at(0)]);
      expect((await store.usage.list({ workspaceId: ws })).map((r) => r.createdAt)).toEqual([at(30), at(10), at(0)]);
      expect(await store.usage.list({ keyId: keyA, workspaceId: ws })).toHaveLength(2);
      // since inclusive, until exclusive
      expect((await store.usage.list({ keyId: keyA, since: at(10) })).map((r) => r.createdAt)).toEqual([at(20), at(10)]);
      expect((await store.usage.list({ keyId: keyA, until: at(10) })).map((r) => r.createdAt)).toEqual([at(0)]);
      expect((await store.usage.list({ workspaceId: ws, since: at(5), until: at(30) })).map((r) => r.createdAt)).toEqual([at(10)]);
      expect((await store.usage.list({ keyId: keyA, limit: 1 })).map((r) => r.createdAt)).toEqual([at(20)]);
      const one = byKey[1];
      expect(await store.usage.list({ requestId: one?.requestId ?? '' })).toEqual([one]);
      expect(await store.usage.list({ keyId: 'no-such-key' })).toEqual([]);
    });

    it('settings: setIfAbsent keeps the first value', async () => {
      expect(await store.settings.get('secret')).toBeNull();
      expect(await store.settings.setIfAbsent('secret', 'first')).toBe('first');
      expect(await store.settings.setIfAbsent('secret', 'second')).toBe('first');
      expect(await store.settings.get('secret')).toBe('first');

      // Racing instances all end up with one value.
      const values = await Promise.all(Array.from({ length: 10 }, (_, i) => store.settings.setIfAbsent('raced', `v${i}`)));
      expect(new Set(values).size).toBe(1);
      expect(await store.settings.get('raced')).toBe(values[0]);
    });

    it('settings: setManyIfAbsent keeps each first value, past one statement’s worth of names', async () => {
      await store.settings.setIfAbsent('many-3', 'before');
      const entries = Array.from({ length: 1203 }, (_, i) => [`many-${i}`, `v${i}`] as const);
      const stored = await store.settings.setManyIfAbsent(entries);
      expect(stored.size).toBe(1203);
      expect([stored.get('many-3'), stored.get('many-1202')]).toEqual(['before', 'v1202']);
      const again = await store.settings.setManyIfAbsent(entries.map(([name]) => [name, 'later'] as const));
      expect(again).toEqual(stored);
    });
  });
}

describe('store on pglite: files', () => {
  it('persists in the data dir across reopen, and locks it against a second opener', async () => {
    const dataDir = join(tempDir(), 'nested', 'data');
    const first = await openStore({ dataDir });
    await first.migrate();
    await first.settings.setIfAbsent('kept', 'yes');
    await expect(openStore({ dataDir })).rejects.toThrow(/already open/);
    await first.close();
    await first.close(); // idempotent

    const again = await openStore({ dataDir });
    try {
      await again.migrate();
      expect(await again.settings.get('kept')).toBe('yes');
    } finally {
      await again.close();
    }
  });
});

describe.skipIf(!postgresOk)('store on postgres: server trouble', () => {
  it('concurrent migrate() from two instances on a fresh database both succeed', async () => {
    const url = await (await getServer()).createDatabase();
    const a = await openStore({ databaseUrl: url, dataDir: tempDir() });
    const b = await openStore({ databaseUrl: url, dataDir: tempDir() });
    try {
      await Promise.all([a.migrate(), b.migrate()]);
      await a.settings.setIfAbsent('x', '1');
      expect(await b.settings.get('x')).toBe('1');
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('ping() rejects while postgres is paused or down, and works again after', async () => {
    // A server of its own: this test pauses, kills and restarts it.
    const own = await startPostgres();
    const errors: Error[] = [];
    const store = await openStore({ databaseUrl: own.url, dataDir: tempDir(), pingTimeoutMs: 1_000, onError: (e) => errors.push(e) });
    try {
      await store.ping();

      own.pause();
      try {
        const t0 = Date.now();
        await expect(store.ping()).rejects.toThrow();
        expect(Date.now() - t0).toBeLessThan(5_000);
      } finally {
        own.resume();
      }
      await store.ping();

      await own.kill(); // crash: the pool's idle connection dies under it
      await new Promise((r) => setTimeout(r, 200));
      expect(errors.length).toBeGreaterThan(0); // reported to onError, not thrown
      await expect(store.ping()).rejects.toThrow();
      await own.restart();
      await store.ping(); // reconnects; the process did not crash on the dropped connections
    } finally {
      await store.close();
      await own.stop();
    }
    // After stop the store is closed; a new one cannot reach it.
    const orphan = await openStore({ databaseUrl: own.url, dataDir: tempDir() });
    try {
      await expect(orphan.ping()).rejects.toThrow();
    } finally {
      await orphan.close();
    }
  });
});

// Taken only with PostgreSQL (limits/sql-ledger.ts): an embedded store serves one instance, whose own ledger holds its budgets.
describe.skipIf(!postgresOk)('store on postgres: the first key', () => {
  it('instances starting together on an empty database create one first key between them', async () => {
    const url = await (await getServer()).createDatabase();
    const stores = await Promise.all([1, 2, 3].map(() => openStore({ databaseUrl: url, dataDir: tempDir() })));
    try {
      await Promise.all(stores.map((s) => s.migrate()));
      const created = await Promise.all(stores.map((s) => ensureFirstKey(s)));
      expect(created.filter((c) => c !== null)).toHaveLength(1);
      expect(await (stores[0] as Store).keys.count()).toBe(1);
      // Once there is a key, no start makes another.
      expect(await ensureFirstKey(stores[1] as Store)).toBeNull();
    } finally {
      await Promise.all(stores.map((s) => s.close()));
    }
  });
});

describe.skipIf(!postgresOk)('store on postgres: budget leases', () => {
  let store: Store;
  beforeAll(async () => {
    store = await (drivers[1] as Driver).fresh();
    await store.migrate();
  });
  afterAll(async () => {
    await store?.close();
  });

  it('leases at once never add up to more than a budget; stored spend and expired leases make room, a shrink gives it back', async () => {
    const ws = await store.workspaces.create({ id: uid('ws'), name: 'W', enabledModels: null, budget: 1 });
    const key = await store.keys.create({ id: uid('key'), name: null, workspaceId: ws.id, hash: uid('h'), rateLimitRpm: 60, budget: 0.5 });
    const scope = `key:${key.id}`;
    const nano = (eur: number) => Math.round(eur * 1e9);
    // Twenty instances ask at once for 0.1 each: 0.5 holds exactly five.
    const granted = await Promise.all(Array.from({ length: 20 }, (_, i) => store.budgetLeases.grow(scope, `lease:i${i}`, nano(0.1), nano(0.1), 60_000)));
    expect(granted.filter((g) => g === nano(0.1))).toHaveLength(5);
    // Refused, with the room the others hold: -1, as it may come back (0 only when no give-back would do).
    expect(granted.filter((g) => g === -1)).toHaveLength(15);
    // A lease takes what is left when that is less than it asked for, and nothing below its minimum.
    const holder = `lease:i${granted.indexOf(nano(0.1))}`;
    await store.budgetLeases.shrink(scope, holder, nano(0.04), 60_000);
    expect(await store.budgetLeases.grow(scope, 'lease:more', nano(0.05), nano(0.3), 60_000)).toBe(-1);
    // At most half of what is left (0.04), so that the next instance finds some too.
    expect(await store.budgetLeases.grow(scope, 'lease:more', nano(0.01), nano(0.3), 60_000)).toBe(nano(0.02));
    // Spend that reaches `spent` is room taken for good: with the holder's lease shrunk by it, the room (0.02) is unchanged.
    await store.usage.insertMany([usage({ requestId: uid('req'), keyId: key.id, workspaceId: ws.id, cost: 0.06 })]);
    await store.budgetLeases.shrink(scope, holder, nano(0.06), 60_000);
    expect(await store.budgetLeases.grow(scope, 'lease:more', 1, nano(0.3), 60_000)).toBe(nano(0.01));
    expect(await store.budgetLeases.grow(scope, 'lease:more', nano(0.011), nano(0.3), 60_000)).toBe(-1);
    // Of 0.44 not spent, this lease holds 0.03 and the others 0.4: were they all given back, 0.41 more would fit, no more.
    expect(await store.budgetLeases.grow(scope, 'lease:more', nano(0.41), nano(0.5), 60_000)).toBe(-1);
    expect(await store.budgetLeases.grow(scope, 'lease:more', nano(0.42), nano(0.5), 60_000)).toBe(0);
    // Unless this lease holds costs that may be in the spend as well (stored, not yet taken off it): up to what it holds.
    expect(await store.budgetLeases.grow(scope, 'lease:more', nano(0.42), nano(0.5), 60_000, nano(0.01))).toBe(-1);
    expect(await store.budgetLeases.grow(scope, 'lease:more', nano(0.44), nano(0.5), 60_000, nano(0.1))).toBe(-1);
    expect(await store.budgetLeases.grow(scope, 'lease:more', nano(0.45), nano(0.5), 60_000, nano(0.1))).toBe(0);
    // An expired lease (its instance died) counts for nothing.
    const other = await store.keys.create({ id: uid('key'), name: null, workspaceId: ws.id, hash: uid('h'), rateLimitRpm: 60, budget: 0.2 });
    expect(await store.budgetLeases.grow(`key:${other.id}`, 'lease:dies', nano(0.2), nano(0.2), 1)).toBe(nano(0.2));
    await new Promise((r) => setTimeout(r, 20));
    expect(await store.budgetLeases.grow(`key:${other.id}`, 'lease:next', nano(0.2), nano(0.2), 60_000)).toBe(nano(0.2));
    // The workspace's budget holds across its keys: 0.06 spent of 1; a lease takes its minimum when that is more than half.
    expect(await store.budgetLeases.grow(`ws:${ws.id}`, 'lease:ws', nano(0.95), nano(2), 60_000)).toBe(0);
    expect(await store.budgetLeases.grow(`ws:${ws.id}`, 'lease:ws', nano(0.9), nano(2), 60_000)).toBe(nano(0.9));
    // What the live leases hold (Redis counts it as held when it loads a total): the dead one is not counted.
    const live = await store.budgetLeases.live(`key:${other.id}`);
    expect(live.nano).toBe(nano(0.2));
    expect(live.ms).toBeGreaterThan(50_000);
    expect(live.ms).toBeLessThanOrEqual(60_000);
    expect(await store.budgetLeases.live('key:nobody')).toEqual({ nano: 0, ms: 0 });
  });

  it('two lease ledgers admit no more than the budget between them, take stored costs off, and give idle room back', async () => {
    const key = await store.keys.create({ id: uid('key'), name: null, workspaceId: null, hash: uid('h'), rateLimitRpm: 60, budget: 1 });
    const scopes = [{ id: `key:${key.id}`, limit: 1, loadSpent: async () => 0 }];
    let now = 1_000_000;
    let storedBefore = 0;
    const options = { now: () => now, steady: () => now, storedBefore: () => storedBefore };
    const a = new LeaseLedger(store.budgetLeases, options);
    const b = new LeaseLedger(store.budgetLeases, options);
    // Each instance's first request goes in before the others: on a busy machine one instance's database calls can
    // wait while the other's run, and that instance could lease the whole budget, half at a time, before the other's
    // first call is answered (which is allowed: the test is of the sums, not of the database's scheduling).
    const firstPair = (tag: string) => Promise.all([a.reserve('t', scopes, 0.05, `${tag}0`), b.reserve('t', scopes, 0.05, `${tag}1`)]);
    try {
      // Each grow leases at most half of what is left (room for 64 was asked); 40 over both instances.
      const results = [
        ...(await firstPair('r')),
        ...(await Promise.all(Array.from({ length: 38 }, (_, i) => (i % 2 ? b : a).reserve('t', scopes, 0.05, `r${i + 2}`)))),
      ];
      const admitted = results.map((r, i) => ({ r, by: i % 2 ? b : a })).filter((x) => x.r.ok);
      // 1 EUR holds 20 of 0.05: never more; at most one request's worth per instance may sit unused in a lease's remainder.
      expect(admitted.length).toBeLessThanOrEqual(20);
      expect(admitted.length).toBeGreaterThanOrEqual(18);
      // Both instances admit: the first to lease did not take it all.
      expect([a, b].map((l) => admitted.filter((x) => x.by === l).length > 0)).toEqual([true, true]);
      // Settled at 0.02 each, the costs stored in `spent` (taken off the leases), and the unused room back after a while without use.
      for (const x of admitted) if (x.r.ok) await x.by.settle(x.r.reservation, 0.02);
      await store.usage.insertMany(admitted.map((_, n) => usage({ requestId: uid(`paid${n}`), keyId: key.id, cost: 0.02 })));
      now += 1;
      storedBefore = now;
      await Promise.all([a.tend(), b.tend()]);
      now += 6_000;
      await Promise.all([a.tend(), b.tend()]);
      const room = 1 - admitted.length * 0.02;
      const after = [
        ...(await firstPair('s')),
        ...(await Promise.all(Array.from({ length: 28 }, (_, i) => (i % 2 ? b : a).reserve('t', scopes, 0.05, `s${i + 2}`)))),
      ];
      const fit = Math.floor(room / 0.05 + 1e-9);
      expect(after.filter((r) => r.ok).length).toBeLessThanOrEqual(fit);
      expect(after.filter((r) => r.ok).length).toBeGreaterThanOrEqual(fit - 2);
    } finally {
      a.stop();
      b.stop();
    }
  });

  it('takes stored costs off a lease while a grow of it is in flight, so another instance is not refused room the budget has', async () => {
    const key = await store.keys.create({ id: uid('key'), name: null, workspaceId: null, hash: uid('h'), rateLimitRpm: 60, budget: 1 });
    const scopes = [{ id: `key:${key.id}`, limit: 1, loadSpent: async () => 0 }];
    let now = 1_000_000;
    let storedBefore = 0;
    const options = { now: () => now, steady: () => now, storedBefore: () => storedBefore };
    // Instance a's grows wait for `open` (near a budget's end, requests refused there keep one in flight).
    let open = () => {};
    let gate: Promise<void> | null = null;
    const slow: typeof store.budgetLeases = {
      grow: async (...args) => {
        if (gate) await gate;
        return store.budgetLeases.grow(...args);
      },
      shrink: (...args) => store.budgetLeases.shrink(...args),
      live: (...args) => store.budgetLeases.live(...args),
    };
    const a = new LeaseLedger(slow, options);
    const b = new LeaseLedger(store.budgetLeases, options);
    try {
      // a leases half of the budget (0.5), admits ten requests of 0.05, and they cost that much; the costs are stored.
      const first = await Promise.all(Array.from({ length: 10 }, (_, i) => a.reserve('t', scopes, 0.05, `r${i}`)));
      expect(first.every((r) => r.ok)).toBe(true);
      for (const r of first) if (r.ok) await a.settle(r.reservation, 0.05);
      await store.usage.insertMany(first.map((_, n) => usage({ requestId: uid(`paid${n}`), keyId: key.id, cost: 0.05 })));
      now += 1;
      storedBefore = now;
      // A request at a needs more room: its grow is in flight while a tends (the 0.5 stored is now in `spent`).
      gate = new Promise<void>((resolve) => {
        open = resolve;
      });
      const pending = a.reserve('t', scopes, 0.05, 'late');
      await a.tend();
      // The stored 0.5 must have left a's lease: else it counts twice (in `spent` and in the lease) and b finds no room.
      const atB = await Promise.all(Array.from({ length: 10 }, (_, i) => b.reserve('t', scopes, 0.05, `b${i}`)));
      expect(atB.filter((r) => r.ok).length).toBeGreaterThanOrEqual(8);
      open();
      await pending;
      const live = await store.budgetLeases.live(`key:${key.id}`);
      expect(live.nano).toBeLessThanOrEqual(0.5e9);
    } finally {
      open();
      a.stop();
      b.stop();
    }
  });
});
