import { mkdirSync, statSync } from 'node:fs';
import { mkdir, stat } from 'node:fs/promises';
import { dirname } from 'node:path';

/**
 * `mkdir -p`, made here rather than with Node's `{ recursive: true }`: where a directory refuses children with ENOENT
 * although it exists (/proc, /sys), Node's recursive mkdir makes the parent (EEXIST), tries the child again, and never
 * ends; a start given GW_DATA_DIR=/proc/gw hung without a word, and the async form spins a libuv thread for good.
 * Here a second ENOENT, once the parent is there, is the answer. A file in the way fails with EEXIST, as with Node's.
 */
export function makeDirSync(dir: string): void {
  try {
    mkdirSync(dir);
  } catch (err) {
    const parent = dirname(dir);
    if (code(err) === 'ENOENT' && parent !== dir) {
      makeDirSync(parent);
      makeOneSync(dir);
    } else if (code(err) !== 'EEXIST' || !statSync(dir).isDirectory()) {
      throw err;
    }
  }
}

/** makeDirSync, off the event loop. */
export async function makeDir(dir: string): Promise<void> {
  try {
    await mkdir(dir);
  } catch (err) {
    const parent = dirname(dir);
    if (code(err) === 'ENOENT' && parent !== dir) {
      await makeDir(parent);
      await makeOne(dir);
    } else if (code(err) !== 'EEXIST' || !(await stat(dir)).isDirectory()) {
      throw err;
    }
  }
}

/** The last step, its parent there: any error but a directory made meanwhile (another process) is final. */
function makeOneSync(dir: string): void {
  try {
    mkdirSync(dir);
  } catch (err) {
    if (code(err) !== 'EEXIST' || !statSync(dir).isDirectory()) throw err;
  }
}

async function makeOne(dir: string): Promise<void> {
  try {
    await mkdir(dir);
  } catch (err) {
    if (code(err) !== 'EEXIST' || !(await stat(dir)).isDirectory()) throw err;
  }
}

const code = (err: unknown) => (err as NodeJS.ErrnoException).code;
