import type { ModelRegistry } from '../routing/registry.js';

/** Rebuilds the registry every `intervalS`; returns a stop function. */
export function scheduleRegistryRebuild(registry: ModelRegistry, intervalS: number, onError: (err: unknown) => void): () => void {
  const timer = setInterval(() => {
    registry.rebuild().catch(onError);
  }, intervalS * 1000);
  timer.unref();
  return () => clearInterval(timer);
}
