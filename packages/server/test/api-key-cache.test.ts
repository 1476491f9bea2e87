import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiKeyAuthenticator, generateApiKey } from '../src/auth/api-keys.js';
import { ensureFirstKey } from '../src/auth/first-key.js';
import { MemoryBus } from '../src/kv/memory.js';
import { openStore, type Store } from '../src/store/index.js';

let dir: string;
let store: Store;
let key: string;
/** Reads of a key by its hash that reached the (real, embedded) store. */
let reads = 0;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'gw-key-cache-'));
  store = await openStore({ dataDir: join(dir, 'data') });
  await store.migrate();
  const first = await ensureFirstKey(store);
  if (!first) throw new Error('no first key');
  key = first.key;
  const getByHash = store.keys.getByHash.bind(store.keys);
  store.keys.getByHash = (hash) => {
    reads++;
    return getByHash(hash);
  };
}, 60_000);
afterAll(async () => {
  await store?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('the API key cache', () => {
  it('reads a key from the store once for a burst of requests that all missed the cache', async () => {
    const auth = new ApiKeyAuthenticator(store, new MemoryBus(), 60_000);
    await auth.start();
    reads = 0;
    const records = await Promise.all(Array.from({ length: 30 }, () => auth.authenticate(`Bearer ${key}`)));
    expect(new Set(records.map((r) => r.id)).size).toBe(1);
    expect(reads).toBe(1);
    await auth.authenticate(`Bearer ${key}`);
    expect(reads).toBe(1);
  });

  it('a shared read that fails fails every waiter, and the next request reads again', async () => {
    const auth = new ApiKeyAuthenticator(store, new MemoryBus(), 60_000);
    await auth.start();
    const real = store.keys.getByHash;
    store.keys.getByHash = () => Promise.reject(new Error('connection refused'));
    const outcomes = await Promise.allSettled(Array.from({ length: 5 }, () => auth.authenticate(`Bearer ${key}`)));
    store.keys.getByHash = real;
    expect(outcomes.map((o) => (o.status === 'rejected' ? (o.reason as { code?: string }).code : 'ok'))).toEqual(Array(5).fill('store_unavailable'));
    reads = 0;
    expect((await auth.authenticate(`Bearer ${key}`)).revoked).toBe(false);
    expect(reads).toBe(1);
  });

  it('answers a key the store does not know 401 without reading the store again for a while', async () => {
    const auth = new ApiKeyAuthenticator(store, new MemoryBus(), 60_000);
    await auth.start();
    const wrong = `gw_live_${'x'.repeat(43)}`;
    reads = 0;
    for (let i = 0; i < 20; i++) {
      const outcome = await Promise.resolve()
        .then(() => auth.authenticate(`Bearer ${wrong}`))
        .then(
          () => 'ok',
          (e: { code?: string }) => e.code,
        );
      expect(outcome).toBe('unauthorized');
    }
    expect(reads).toBe(1);
    // A real key is read as before.
    expect((await auth.authenticate(`Bearer ${key}`)).revoked).toBe(false);
    expect(reads).toBe(2);
  });

  /** A new key, and a store read of it that returns the record as it was when the read began, once `release` is called. */
  async function heldRead(): Promise<{ key: string; id: string; release: () => void; started: Promise<void>; restore: () => void }> {
    const made = generateApiKey();
    const id = `key_race${Math.random().toString(36).slice(2, 10)}`;
    await store.keys.create({ id, name: 'race', workspaceId: null, hash: made.hash, rateLimitRpm: 60, budget: null });
    const real = store.keys.getByHash;
    const { promise: gate, resolve: release } = deferred();
    const { promise: started, resolve: begun } = deferred();
    let held = false;
    store.keys.getByHash = async (hash) => {
      const record = await real(hash);
      if (hash === made.hash && !held) {
        held = true;
        begun();
        await gate;
      }
      return record;
    };
    return { key: made.key, id, release, started, restore: () => (store.keys.getByHash = real) };
  }

  it('a background refresh that began before a revocation does not bring the key back', async () => {
    const r = await heldRead();
    const expiring = new ApiKeyAuthenticator(store, new MemoryBus(), -1);
    await expiring.start();
    r.restore();
    await expiring.authenticate(`Bearer ${r.key}`); // cached, unheld read
    const real = store.keys.getByHash;
    const { promise: gate, resolve: release } = deferred();
    const { promise: refreshDone, resolve: refreshed } = deferred();
    store.keys.getByHash = async (hash) => {
      const record = await real(hash); // as it is before the revocation
      await gate;
      setTimeout(refreshed, 0);
      return record;
    };
    await expiring.authenticate(`Bearer ${r.key}`); // served from the cache; starts the refresh, which reads and waits
    await store.keys.revoke(r.id);
    await expiring.announce('revoke', r.id);
    store.keys.getByHash = real;
    release();
    await refreshDone;
    await new Promise((res) => setTimeout(res, 20));
    expect(() => expiring.authenticate(`Bearer ${r.key}`)).toThrow(/revoked/);
  });

  it('a first read that began before a revocation does not cache the key as live', async () => {
    const r = await heldRead();
    const auth = new ApiKeyAuthenticator(store, new MemoryBus(), 60_000);
    await auth.start();
    const first = Promise.resolve(auth.authenticate(`Bearer ${r.key}`)).then(
      () => 'ok',
      (e: { code?: string }) => e.code,
    );
    await r.started;
    await store.keys.revoke(r.id);
    await auth.announce('revoke', r.id);
    r.restore();
    r.release();
    await first;
    const next = await Promise.resolve()
      .then(() => auth.authenticate(`Bearer ${r.key}`))
      .then(
        () => 'ok',
        (e: { code?: string }) => e.code,
      );
    expect(next).toBe('unauthorized');
  });
});

/** A promise and what settles it (Promise.withResolvers, outside the project's ES2023 library). */
function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}
