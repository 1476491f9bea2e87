// The V8 flags `npm start` adds for the cores the gateway may run on; run directly, prints them.
// On one core, V8's concurrent and parallel GC threads take that core from the event loop:
// single-threaded collection cut the bench's p99 tails about threefold there (docs/decisions.md).
// With more cores the helpers run beside the event loop, so nothing is added.
import { availableParallelism } from 'node:os';
import { pathToFileURL } from 'node:url';

/** @param {number} cores the CPUs this process may run on (its affinity) */
export function coreFlags(cores) {
  return cores <= 1 ? ['--single-threaded-gc'] : [];
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) process.stdout.write(coreFlags(availableParallelism()).join(' '));
