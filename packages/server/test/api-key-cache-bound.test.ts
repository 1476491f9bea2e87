import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiKeyAuthenticator, generateApiKey } from '../src/auth/api-keys.js';
import { MemoryBus } from '../src/kv/memory.js';
import { newId } from '../src/lib/ids.js';
import { openStore, type Store } from '../src/store/index.js';

// More keys in use than the cache holds (100,000 in a gateway; 10 here): the cache and what it keeps beside it stay
// within its bound, and a key that left it and came back is still revoked at once.
const BOUND = 10;
let dir: string;
let store: Store;
const keys: { id: string; key: string }[] = [];
let reads = 0;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'gw-key-bound-'));
  store = await openStore({ dataDir: join(dir, 'data') });
  await store.migrate();
  for (let i = 0; i < BOUND * 5; i++) {
    const { key, hash } = generateApiKey();
    const rec = await store.keys.create({ id: newId('key'), name: null, workspaceId: null, hash, rateLimitRpm: 60, budget: null });
    keys.push({ id: rec.id, key });
  }
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

describe('an API key cache smaller than the keys in use', () => {
  it('keeps no more ids than keys it holds, however many keys it has served', async () => {
    const auth = new ApiKeyAuthenticator(store, new MemoryBus(), 60_000, 2_000, BOUND);
    await auth.start();
    for (const { key } of keys) await auth.authenticate(`Bearer ${key}`);
    // Each id served stayed mapped after its key left the cache: 50 here, every key ever used in a gateway.
    expect(auth.cacheSize()).toEqual({ keys: BOUND, ids: BOUND });
  });

  it('lets the key longest without a read leave first: a key read again stays', async () => {
    // Every copy is stale at once, so each use reads the key again (in the background).
    const auth = new ApiKeyAuthenticator(store, new MemoryBus(), -1, 2_000, BOUND);
    await auth.start();
    const [hot, ...rest] = keys;
    if (!hot) throw new Error('no keys');
    await auth.authenticate(`Bearer ${hot.key}`);
    let waited = 0;
    for (const [i, { key }] of rest.slice(0, BOUND * 4).entries()) {
      await auth.authenticate(`Bearer ${key}`);
      if (i % 4 !== 3) continue;
      // Served from the cache (and read again behind it), not a read the request waits for.
      const found = auth.authenticate(`Bearer ${hot.key}`);
      if (found instanceof Promise) waited++;
      await found;
      await new Promise((r) => setTimeout(r, 5));
    }
    // Oldest in first out, the key in use left the cache every 10 others and its next request waited for the store.
    expect(waited).toBe(0);
  });

  it('revokes at once a key that left the cache and was read again', async () => {
    const auth = new ApiKeyAuthenticator(store, new MemoryBus(), 60_000, 2_000, BOUND);
    await auth.start();
    const [first] = keys;
    if (!first) throw new Error('no keys');
    await auth.authenticate(`Bearer ${first.key}`);
    for (const { key } of keys.slice(1, BOUND * 2)) await auth.authenticate(`Bearer ${key}`);
    reads = 0;
    await auth.authenticate(`Bearer ${first.key}`);
    expect(reads).toBe(1);
    await store.keys.revoke(first.id);
    await auth.announce('revoke', first.id);
    expect(() => auth.authenticate(`Bearer ${first.key}`)).toThrow(/revoked/);
  });
});
