/** The embedded database's data-dir lock: one gateway process per GW_DATA_DIR. */
import { closeSync, openSync, readFileSync, readlinkSync, rmSync, statSync, utimesSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { isProcessAlive, processStartTime } from '../lib/process-alive.js';

/** The lock files this process holds, so that its own pid in a lock can tell this process from an earlier one. */
const heldLocks = new Set<string>();

/** How often a holder touches its lock, and how long untouched makes one from another pid namespace stale. */
const LOCK_REFRESH_MS = 3_000;
const LOCK_STALE_MS = 15_000;
/** How long a lock of another machine is watched for a touch at least: its touch time is told by its own clock. */
const LOCK_WATCH_MS = 2 * LOCK_REFRESH_MS + 1_000;

/**
 * PGlite is one process's database: a second process opening the same files
 * would corrupt them. A lock file naming its process (pid and start time)
 * turns that into a clear error; a lock left by a process that is gone is
 * taken over, even where its pid now belongs to another process: a gateway
 * killed in a container restarts with the same pid, and one killed with its
 * machine may find its pid taken by anything after the reboot.
 *
 * A pid means something only in its own pid namespace: two containers on one
 * volume are each pid 1 (or see no such pid as the other's), and both took
 * the lock as stale. The lock names its namespace (boot and pid namespace),
 * and its holder touches it every few seconds: one of another namespace is
 * stale once untouched for {@link LOCK_STALE_MS}, which a start waits out.
 */
export async function lockDataDir(dataDir: string): Promise<() => void> {
  const lockFile = join(dataDir, 'pglite.lock');
  const namespace = pidNamespace();
  const started = processStartTime(process.pid);
  const ours = [process.pid, ...(started === null ? [] : [started, ...(namespace === null ? [] : [namespace])])].join(' ');
  const giveUp = Date.now() + 2 * LOCK_STALE_MS;
  while (Date.now() < giveUp) {
    if (created(lockFile, ours)) return held(lockFile);
    if (heldLocks.has(lockFile)) throw new Error(`the embedded database in ${dataDir} is already open in this process`);
    const seen = readLock(lockFile);
    if (seen === null) continue; // removed meanwhile: try again
    const [pidText, theirStart, theirs] = seen.text.trim().split(' ');
    const owner = Number.parseInt(pidText ?? '', 10);
    const inUse = `the embedded database in ${dataDir} is in use by process ${owner}`;
    const advice = 'stop it, use another GW_DATA_DIR, or set DATABASE_URL to share a PostgreSQL';
    if (seen.text === '') {
      // Another start between its create and its write: judged once written, or once it is old (that start killed).
      if (Date.now() - seen.mtimeMs < LOCK_STALE_MS) {
        await sleep(LOCK_RETRY_MS);
        continue;
      }
    } else if (theirs !== undefined && theirs !== namespace) {
      if (await touchedWithin(lockFile, sameBoot(theirs, namespace)))
        throw new Error(`${inUse} of another container or machine (its lock is kept fresh); ${advice}`);
    } else if (Number.isInteger(owner) && owner > 0 && owner !== process.pid && ownerRuns(owner, theirStart)) {
      throw new Error(`${inUse}; ${advice}`);
    }
    // Stale: its process is gone.
    const took = takeOver(lockFile, seen, ours);
    if (took === 'taken') return held(lockFile);
    if (took === 'busy') await sleep(LOCK_RETRY_MS);
  }
  throw new Error(`could not lock ${lockFile}`);
}

/** How long a start waits for another's create or takeover to finish before it looks again. */
const LOCK_RETRY_MS = 20;

interface SeenLock {
  text: string;
  ino: number;
  mtimeMs: number;
}

function readLock(lockFile: string): SeenLock | null {
  try {
    const { ino, mtimeMs } = statSync(lockFile);
    return { text: readFileSync(lockFile, 'utf8'), ino, mtimeMs };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

/** Creates the lock with `content` if there is none; false if there is one. */
function created(lockFile: string, content: string): boolean {
  let fd: number;
  try {
    fd = openSync(lockFile, 'wx');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw err;
  }
  try {
    writeSync(fd, content);
  } finally {
    closeSync(fd);
  }
  return true;
}

/**
 * Replaces the stale lock `seen` with ours, if it is still there. Reading a lock, judging it stale, removing it and
 * creating one is no single step: two starts that judged one stale lock each removed it and created their own, the
 * later one removing the earlier's, and both opened the database. The removal is made under a takeover file only one
 * start can create: the lock is removed only while it is still the one judged (its inode and its text, as another
 * start's new lock can have the inode of the one it replaced), and any other start then finds a live lock. A takeover
 * file outlives its start only if that start was killed within its few system calls: it is removed once
 * {@link LOCK_STALE_MS} old.
 */
function takeOver(lockFile: string, seen: SeenLock, ours: string): 'taken' | 'busy' | 'changed' {
  const marker = `${lockFile}.takeover`;
  let fd: number;
  try {
    fd = openSync(marker, 'wx');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    try {
      if (Date.now() - statSync(marker).mtimeMs > LOCK_STALE_MS) rmSync(marker, { force: true });
    } catch {
      // Gone meanwhile: its takeover ended.
    }
    return 'busy';
  }
  try {
    writeSync(fd, String(process.pid)); // for whoever finds it
    closeSync(fd);
    const now = readLock(lockFile);
    if (now !== null && (now.ino !== seen.ino || now.text !== seen.text)) return 'changed';
    rmSync(lockFile, { force: true });
    return created(lockFile, ours) ? 'taken' : 'changed';
  } finally {
    rmSync(marker, { force: true });
  }
}

/** The lock just created, kept fresh until released (on close or at exit). */
function held(lockFile: string): () => void {
  heldLocks.add(lockFile);
  const refresh = setInterval(() => {
    const now = new Date();
    try {
      utimesSync(lockFile, now, now);
    } catch {
      // Gone (removed by hand): nothing to keep fresh.
    }
  }, LOCK_REFRESH_MS).unref();
  let released = false;
  const release = () => {
    if (released) return;
    released = true;
    clearInterval(refresh);
    heldLocks.delete(lockFile);
    process.off('exit', release);
    rmSync(lockFile, { force: true });
  };
  process.on('exit', release);
  return release;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** This process's pid namespace on this boot of this machine; null where that cannot be read (not Linux). */
function pidNamespace(): string | null {
  try {
    const boot = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
    const ns = /\[(\d+)\]/.exec(readlinkSync('/proc/self/ns/pid'))?.[1];
    return ns === undefined || boot === '' ? null : `${boot}/${ns}`;
  } catch {
    return null;
  }
}

/** Whether a lock names this boot of this machine (another container on it), whose clock its touch times are told by. */
function sameBoot(theirs: string, ours: string | null): boolean {
  return ours !== null && theirs.split('/', 1)[0] === ours.split('/', 1)[0];
}

/**
 * Whether a lock's holder touches it still: untouched for LOCK_STALE_MS (waited out from its last touch), it is stale.
 * A lock of another machine is watched for a touch whatever its time says (at least LOCK_WATCH_MS, at most
 * LOCK_STALE_MS): a holder whose clock is behind ours touches it with times that look stale here, one ahead with
 * times that would have a start wait for as long as it is ahead.
 */
async function touchedWithin(lockFile: string, clockShared: boolean): Promise<boolean> {
  const mtime = () => {
    try {
      return statSync(lockFile).mtimeMs;
    } catch {
      return null; // removed meanwhile: its holder ended
    }
  };
  const first = mtime();
  if (first === null) return false;
  const untilStale = first + LOCK_STALE_MS - Date.now();
  const wait = clockShared ? untilStale : Math.min(Math.max(untilStale, LOCK_WATCH_MS), LOCK_STALE_MS);
  if (wait <= 0) return false;
  console.error(`gw: ${lockFile} is held by a gateway of another container or machine: waiting ${Math.ceil(wait / 1000)} s to see whether it still runs`);
  await new Promise((r) => setTimeout(r, wait));
  const last = mtime();
  return last !== null && last !== first;
}

/** Whether the process that wrote a lock still runs: its pid, with the same start time where the lock has one. */
function ownerRuns(pid: number, started: string | undefined): boolean {
  if (!isProcessAlive(pid)) return false;
  if (started === undefined) return true;
  const now = processStartTime(pid);
  return now === null || now === started;
}
