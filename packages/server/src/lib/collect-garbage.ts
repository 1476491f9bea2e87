import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

type Gc = (options?: { type?: 'major' | 'minor'; execution?: 'sync' | 'async'; flavor?: 'regular' | 'last-resort' }) => void;

let gc: Gc | null | undefined;

/**
 * A full collection on demand, without starting node with --expose-gc.
 * 'last-resort' is V8's memory-reducing collection: besides the garbage,
 * it hands back the freed heap pages V8 keeps pooled for reuse, which an
 * ordinary collection leaves resident. It stops the thread for as long as
 * it runs (tens of ms for a heap of about 50 MB): only for quiet moments.
 */
export function collectGarbage(flavor: 'regular' | 'last-resort' = 'regular'): boolean {
  if (gc === undefined) {
    setFlagsFromString('--expose-gc');
    const found = runInNewContext('gc') as unknown;
    gc = typeof found === 'function' ? (found as Gc) : null;
  }
  if (!gc) return false;
  gc({ type: 'major', execution: 'sync', flavor });
  return true;
}
