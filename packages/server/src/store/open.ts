/**
 * Opens the store: PostgreSQL through a small `pg` Pool when a database url
 * is given, otherwise embedded PGlite persisted under the data dir.
 */
import { closeSync, openSync, readFileSync, readlinkSync, rmSync, statSync, utimesSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { QueryConfig } from 'pg';
import { makeDirSync } from '../lib/make-dir.js';
import { isProcessAlive, processStartTime } from '../lib/process-alive.js';
import { loadNodePg, pgProxy } from './drizzle-cjs.js';
import { type Db, DrizzleStore } from './drizzle-store.js';
import { PgliteThread } from './pglite-client.js';
import * as schema from './schema.js';
import type { Store } from './types.js';

const { drizzle: drizzleProxy } = pgProxy;

/**
 * The generated SQL migrations (packages/server/drizzle), resolved from this
 * module so it works from src/store (vitest) and from dist/store (built).
 */
export const MIGRATIONS_FOLDER = fileURLToPath(new URL('../../drizzle', import.meta.url));

/** Serialises migrations across gateway instances sharing one PostgreSQL. */
const MIGRATION_LOCK_KEY = 0x67770001; // "gw" + 1

export interface OpenStoreOptions {
  /** `postgres://…`; none: embedded PGlite in `dataDir`. */
  databaseUrl?: string | undefined;
  /** Embedded store location; PGlite's files go to `<dataDir>/pglite`. */
  dataDir: string;
  /** PostgreSQL pool size (default 5). */
  poolMax?: number | undefined;
  /** PostgreSQL `statement_timeout` for every statement (default 10,000 ms). */
  statementTimeoutMs?: number | undefined;
  /** `ping()` gives up after this long (default 2,000 ms). */
  pingTimeoutMs?: number | undefined;
  /**
   * Errors of idle PostgreSQL connections (database restarted, network
   * dropped). The pool discards the connection and the next query opens a
   * new one; without this handler they are ignored, never fatal.
   */
  onError?: ((err: Error) => void) | undefined;
}

export async function openStore(opts: OpenStoreOptions): Promise<Store> {
  if (opts.databaseUrl !== undefined && opts.databaseUrl !== '') return openPostgres(opts.databaseUrl, opts);
  return openPglite(opts.dataDir);
}

async function openPostgres(databaseUrl: string, opts: OpenStoreOptions): Promise<Store> {
  const { default: pg } = await import('pg');
  const { nodePg, nodePgMigrator } = loadNodePg();
  const { drizzle: drizzlePg } = nodePg;
  const { migrate: migratePg } = nodePgMigrator;
  const statementTimeoutMs = opts.statementTimeoutMs ?? 10_000;
  const pingTimeoutMs = opts.pingTimeoutMs ?? 2_000;
  const onError = opts.onError ?? (() => {});
  const pool = new pg.Pool({
    connectionString: databaseUrl,
    max: opts.poolMax ?? 5,
    connectionTimeoutMillis: 2_000,
    idleTimeoutMillis: 30_000,
    // Server side: no statement runs longer than this.
    statement_timeout: statementTimeoutMs,
    idle_in_transaction_session_timeout: statementTimeoutMs * 3,
    // Client side: a server that accepts but never answers (paused, network
    // black hole) fails the query, and the pool drops that connection.
    query_timeout: statementTimeoutMs + 2_000,
    keepAlive: true,
    application_name: 'gw',
  });
  // An idle connection that dies emits 'error' on the pool: never crash.
  pool.on('error', onError);
  const db = drizzlePg({ client: pool, schema });

  return new DrizzleStore(db, {
    kind: 'postgres',
    async migrate() {
      const client = await pool.connect();
      const swallow = (err: Error) => onError(err);
      client.on('error', swallow);
      let broken = false;
      try {
        // Migrations may outlast statement_timeout, and so may waiting for
        // another instance that holds the lock.
        await client.query('SET statement_timeout = 0');
        await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK_KEY]);
        try {
          await migratePg(drizzlePg({ client, schema }), { migrationsFolder: MIGRATIONS_FOLDER });
        } finally {
          await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK_KEY]);
        }
        await client.query('RESET statement_timeout');
      } catch (err) {
        broken = true;
        throw err;
      } finally {
        client.off('error', swallow);
        // A connection in an unknown state is closed rather than reused.
        client.release(broken);
      }
    },
    async ping() {
      // pg honours a per-query query_timeout (its types do not list it); on
      // timeout the pool discards the connection.
      const query: QueryConfig & { query_timeout: number } = { text: 'SELECT 1', query_timeout: pingTimeoutMs };
      await pool.query(query);
    },
    async close() {
      await pool.end();
    },
  });
}

/**
 * Embedded PGlite on its own thread (pglite-thread.ts): drizzle builds the
 * SQL here and the thread runs it, so the database's work never holds the
 * event loop that serves requests.
 */
async function openPglite(dataDir: string): Promise<Store> {
  const dir = join(dataDir, 'pglite');
  makeDirSync(dir);
  const unlock = await lockDataDir(dataDir);
  let thread: PgliteThread;
  try {
    thread = await PgliteThread.open(dir, MIGRATIONS_FOLDER);
  } catch (err) {
    unlock();
    throw err;
  }
  const db: Db = drizzleProxy(thread.remote, { schema });
  return new DrizzleStore(db, {
    kind: 'pglite',
    created: thread.origin === 'existing' ? null : thread.origin,
    copyRows: (sql, csv) => thread.copy(sql, csv),
    migrate: () => thread.migrate(),
    ping: () => thread.ping(),
    logTo: (log) => thread.logTo(log),
    async close() {
      try {
        await thread.close();
      } finally {
        unlock();
      }
    },
  });
}

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
async function lockDataDir(dataDir: string): Promise<() => void> {
  const lockFile = join(dataDir, 'pglite.lock');
  const namespace = pidNamespace();
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(lockFile, 'wx');
      const started = processStartTime(process.pid);
      writeSync(fd, [process.pid, ...(started === null ? [] : [started, ...(namespace === null ? [] : [namespace])])].join(' '));
      closeSync(fd);
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
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      if (heldLocks.has(lockFile)) throw new Error(`the embedded database in ${dataDir} is already open in this process`);
      const [pidText, started, theirs] = readFileSync(lockFile, 'utf8').trim().split(' ');
      const owner = Number.parseInt(pidText ?? '', 10);
      const inUse = `the embedded database in ${dataDir} is in use by process ${owner}`;
      const advice = 'stop it, use another GW_DATA_DIR, or set DATABASE_URL to share a PostgreSQL';
      if (theirs !== undefined && theirs !== namespace) {
        if (await touchedWithin(lockFile, sameBoot(theirs, namespace)))
          throw new Error(`${inUse} of another container or machine (its lock is kept fresh); ${advice}`);
      } else if (Number.isInteger(owner) && owner > 0 && owner !== process.pid && ownerRuns(owner, started)) {
        throw new Error(`${inUse}; ${advice}`);
      }
      rmSync(lockFile, { force: true }); // stale: its process is gone
    }
  }
  throw new Error(`could not lock ${lockFile}`);
}

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
