import { randomToken } from '../lib/crypto.js';
import type { Store } from '../store/types.js';

/** GW_SECRET, or one generated on first start and kept in the store so every instance shares it. */
export async function rootSecret(store: Store, fromEnv: string | null): Promise<string> {
  if (fromEnv) return fromEnv;
  return store.settings.setIfAbsent('root_secret', randomToken(32));
}
