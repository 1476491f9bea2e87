// The V8 flags `npm start` adds for the cores the gateway may run on; run directly, prints them.
// On one core, V8's parallel pause work and its pool of helpers take turns on that core with the event loop:
// pauses are done on the event loop and one helper marks and sweeps concurrently (docs/decisions.md).
// With more cores the helpers run beside the event loop, so nothing is added.
import { availableParallelism } from 'node:os';
import { pathToFileURL } from 'node:url';

/** @param {number} cores the CPUs this process may run on (its affinity) */
export function coreFlags(cores) {
  return cores <= 1 ? ['--no-parallel-scavenge', '--no-parallel-compaction', '--no-parallel-pointer-update', '--v8-pool-size=1'] : [];
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) process.stdout.write(coreFlags(availableParallelism()).join(' '));
