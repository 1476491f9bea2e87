import { randomUUID } from 'node:crypto';
import type { Bus } from '../kv/types.js';
import type { ModelRegistry, RebuildReport } from './registry.js';

export const REGISTRY_REBUILD_CHANNEL = 'gw:registry-rebuild';

/**
 * Makes a rebuild asked for through the admin API reach every instance sharing Redis: each reads every provider's
 * list again, so that all of them drop (or take up) an offer together, not the one the call reached while the others
 * route by their old lists until their own next rebuild, hours later. Scheduled rebuilds stay each instance's own.
 * Returns the admin API's rebuild: this instance's, with the others told to follow.
 */
export async function shareRegistryRebuilds(bus: Bus, registry: ModelRegistry, onError: (err: unknown) => void): Promise<() => Promise<RebuildReport>> {
  const instance = randomUUID();
  await bus.subscribe(REGISTRY_REBUILD_CHANNEL, (message) => {
    // Every instance hears its own message too: it is rebuilding already.
    if (message !== instance) registry.rebuild().catch(onError);
  });
  return () => {
    // A Redis away only leaves the others to their schedule: this instance's answer does not wait on it.
    bus.publish(REGISTRY_REBUILD_CHANNEL, instance).catch(onError);
    return registry.rebuild();
  };
}
