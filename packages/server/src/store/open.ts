/**
 * Opens the store: PostgreSQL through a small `pg` Pool when a database url
 * is given, otherwise embedded PGlite persisted under the data dir.
 */
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { QueryConfig } from 'pg';
import { makeDirSync } from '../lib/make-dir.js';
import { lockDataDir } from './data-dir-lock.js';
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
    async clockMs() {
      const query: QueryConfig & { query_timeout: number } = {
        text: 'SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS ms',
        query_timeout: pingTimeoutMs,
      };
      const { rows } = await pool.query<{ ms: number }>(query);
      return Number(rows[0]?.ms);
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
