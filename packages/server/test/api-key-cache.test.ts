import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiKeyAuthenticator } from '../src/auth/api-keys.js';
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
});
