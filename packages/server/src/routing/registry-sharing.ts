import { randomUUID } from 'node:crypto';
import type { Bus } from '../kv/types.js';
import type { ModelRegistry, RebuildReport } from './registry.js';

export const REGISTRY_REBUILD_CHANNEL = 'gw:registry-rebuild';

/**
 * Makes a rebuild asked for through the admin API reach every instance sharing Redis: each reads every provider's
 * list again, so that all of them drop (or take up) an offer together, not the one the call reached while the others
 * route by their old lists until their own next rebuild, hours later. Scheduled rebuilds are each instance's own, but
 * one that reads a list other than the one the store keeps (the first instance whose schedule comes round after a
 * change upstream) asks the others too. Returns the admin API's rebuild: this instance's, with the others told to follow.
 */
export async function shareRegistryRebuilds(bus: Bus, registry: ModelRegistry, onError: (err: unknown) => void): Promise<() => Promise<RebuildReport>> {
  const instance = randomUUID();
  // Rebuilds another instance asked for, still running: a change one reads is not told on, or a provider whose list
  // differs from one read to the next (two backends behind its address) would have the instances ask each other forever.
  let following = 0;
  // Rebuilds asked for through the admin API, still running: the others were told at the call.
  let asking = 0;
  const askOthers = () => {
    // A Redis away only leaves the others to their schedule: this instance's rebuild does not wait on it.
    bus.publish(REGISTRY_REBUILD_CHANNEL, instance).catch(onError);
  };
  await bus.subscribe(REGISTRY_REBUILD_CHANNEL, (message) => {
    // Every instance hears its own message too: it is rebuilding already.
    if (message === instance) return;
    following++;
    registry
      .rebuild()
      .catch(onError)
      .finally(() => following--);
  });
  registry.onListsChanged(() => {
    if (following === 0 && asking === 0) askOthers();
  });
  return () => {
    askOthers();
    asking++;
    const rebuilt = registry.rebuild();
    rebuilt.then(
      () => asking--,
      () => asking--,
    );
    return rebuilt;
  };
}
