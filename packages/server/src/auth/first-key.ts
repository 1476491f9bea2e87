import { newId } from '../lib/ids.js';
import type { Store } from '../store/types.js';
import { generateApiKey } from './api-keys.js';

export const FIRST_KEY_RPM = 60;

/** A claim this old whose key never came (its instance died on the way) no longer holds others back. */
const CLAIM_STALE_MS = 60_000;

/**
 * On a store with no key at all, creates a default workspace and one key;
 * returns the key once. Instances starting together on one empty database
 * claim the first key in the store first, so that only one creates it.
 */
export async function ensureFirstKey(store: Store): Promise<{ id: string; key: string } | null> {
  // Not a count: at every start, that read each of an operator's keys (100,000: 200 ms on the embedded store).
  if (await store.keys.any()) return null;
  const mine = `${newId('claim')}:${Date.now()}`;
  const claim = await store.settings.setIfAbsent('first_key_claim', mine);
  if (claim !== mine && Date.now() - Number(claim.split(':')[1]) < CLAIM_STALE_MS) return null;
  const ws = await store.workspaces.create({ id: newId('ws'), name: 'default', enabledModels: null, budget: null });
  const { key, hash } = generateApiKey();
  const rec = await store.keys.create({ id: newId('key'), name: 'first key', workspaceId: ws.id, hash, rateLimitRpm: FIRST_KEY_RPM, budget: null });
  return { id: rec.id, key };
}
