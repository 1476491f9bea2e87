/**
 * The embedded database's own thread: PGlite (PostgreSQL compiled to WASM)
 * runs here, so a batch of usage rows or a long report query never holds
 * the event loop that serves requests. The main thread sends SQL and
 * parameters (see pglite-client.ts) and gets rows back.
 *
 * Written with erasable TypeScript only, and importing npm packages only:
 * under vitest Node loads this file as it is, stripping the types.
 */

import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { getPriority, setPriority } from 'node:os';
import { dirname, join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { parentPort, workerData } from 'node:worker_threads';
import type * as Pglite from '@electric-sql/pglite';
import type { ClusterOrigin } from './pglite-client.js';

// PGlite's CommonJS build: Node's ESM loader reads a package's package.json for every module file it loads (drizzle-cjs.ts).
// Drizzle is not loaded here: the main thread builds every statement, the migrations' too (pglite-client.ts).
const require = createRequire(import.meta.url);
const { PGlite, types } = require('@electric-sql/pglite') as typeof Pglite;

interface ThreadData {
  dir: string;
}

type Call =
  | { id: number; op: 'query'; sql: string; params: unknown[]; rows: 'array' | 'object' }
  | { id: number; op: 'copy'; sql: string; csv: string }
  | { id: number; op: 'migrate'; statements: string[] }
  | { id: number; op: 'ping' | 'close' };

/** As drizzle's PGlite driver reads them: dates, times and numeric arrays stay text for drizzle to map. */
const RAW = (value: string) => value;
const PARSERS = {
  [types.TIMESTAMP]: RAW,
  [types.TIMESTAMPTZ]: RAW,
  [types.INTERVAL]: RAW,
  [types.DATE]: RAW,
  1231: RAW, // numeric[]
  1115: RAW, // timestamp[]
  1185: RAW, // timestamptz[]
  1187: RAW, // interval[]
  1182: RAW, // date[]
};

const port = parentPort;
if (!port) throw new Error('pglite-thread runs as a worker thread');
const { dir } = workerData as ThreadData;

/**
 * Background work: on Linux, a thread's nice value is its own (setpriority
 * on the calling thread), so this thread yields the core to the event loop
 * that serves requests instead of preempting it for a whole batch; at 5 it
 * still gets a quarter of a contended core, enough to keep up with usage.
 */
const NICE = 5;

async function main(): Promise<void> {
  if (process.platform === 'linux') {
    try {
      // Relative to the process's own niceness (lowering a thread's priority needs no privilege).
      setPriority(Math.min(19, getPriority() + NICE));
    } catch {
      // Not allowed here: run at the process's priority.
    }
  }
  let client: Pglite.PGlite;
  let origin: ClusterOrigin;
  try {
    // A creation cut short (the process killed while the cluster's files were being written) left a directory that
    // holds part of a cluster: nothing was ever stored in it, so it is made again rather than opened as it is.
    const creating = `${dir}.creating`;
    if (existsSync(creating)) {
      rmSync(dir, { recursive: true, force: true });
      mkdirSync(dir);
    }
    const fresh = readdirSync(dir).length === 0;
    const template = fresh ? buildTemplate() : null;
    origin = !fresh ? 'existing' : template === null ? 'initdb' : 'template';
    if (fresh) writeFileSync(creating, '');
    // PostgreSQL's default 128 MB of shared buffers would live in this process's memory. The hot pages
    // are small tables and the usage table's tail; the rest is a file read away (the OS caches it).
    // 4 MB: about 4 MB less at the 1,000-stream peak than 8, no change in this thread's CPU per request (decisions.md).
    client = await PGlite.create({
      dataDir: dir,
      postgresqlconf: ['shared_buffers = 4MB'],
      ...(template === null ? {} : { loadDataDir: template }),
    });
    if (fresh) rmSync(creating, { force: true });
  } catch (err) {
    port?.postMessage({ op: 'failed', error: describe(err) });
    return;
  }
  port?.postMessage({ op: 'ready', origin });
  port?.on('message', (call: Call) => {
    void answer(client, call).then(
      (rows) => port.postMessage({ id: call.id, ok: true, rows }),
      (err: unknown) => port.postMessage({ id: call.id, ok: false, error: describe(err) }),
    );
  });
}

async function answer(client: Pglite.PGlite, call: Call): Promise<unknown[]> {
  switch (call.op) {
    case 'query': {
      return (await client.query(call.sql, call.params, { rowMode: call.rows, parsers: PARSERS })).rows as unknown[];
    }
    case 'copy':
      // One simple query, so one implicit transaction; its COPY reads the rows from PGlite's /dev/blob.
      await client.exec(call.sql, { blob: new Blob([call.csv]) });
      return [];
    case 'migrate':
      // The migrations not yet applied and their bookkeeping rows, all or none.
      if (call.statements.length > 0) {
        await client.transaction(async (tx) => {
          for (const statement of call.statements) await tx.exec(statement);
        });
      }
      collectStartupGarbage();
      return [];
    case 'ping':
      await client.query('SELECT 1');
      return [];
    case 'close':
      await client.close();
      return [];
  }
}

/**
 * For a database not yet created (its directory empty), the cluster the build
 * dumped (scripts/pglite-template.mjs), if it is of the PGlite installed:
 * PGlite's own initdb takes the process to 1.0-1.2 GB resident for a moment
 * and 11-17 s, where loading the template peaks at about 235 MB in about 2 s.
 * Without one (a build that did not make it), PGlite initialises the cluster
 * itself, as it did before there was a template.
 */
function buildTemplate(): Blob | null {
  // Two levels below the package, from src/store under vitest as from dist/store.
  const tarball = new URL('../../dist/pglite-template.tar.gz', import.meta.url);
  const stamp = new URL('../../dist/pglite-template.json', import.meta.url);
  if (!existsSync(tarball) || !existsSync(stamp)) return null;
  const installed = JSON.parse(readFileSync(join(dirname(require.resolve('@electric-sql/pglite')), '..', 'package.json'), 'utf8')).version;
  if (JSON.parse(readFileSync(stamp, 'utf8')).pglite !== installed) return null;
  return new Blob([readFileSync(tarball)]);
}

/**
 * Opening PGlite leaves hundreds of MB of dead buffers (the WASM binary, the
 * data files' bundle) in this thread's heap, and the thread is too quiet for
 * V8 to collect them soon: they were most of the gateway's resident memory
 * for minutes. Collected once, when the database is ready.
 */
function collectStartupGarbage(): void {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as unknown;
  // 'last-resort' also hands back the heap pages V8 pools after a collection.
  if (typeof gc === 'function') gc({ type: 'major', execution: 'sync', flavor: 'last-resort' });
}

/**
 * The file system errors PGlite's own (Emscripten's) throws without a message, only a WASI errno: a full disk
 * opening the database read "[object Object]".
 */
const WASI_ERRNO: Record<number, string> = {
  2: 'EACCES: permission denied',
  19: 'EDQUOT: disk quota exceeded',
  29: 'EIO: input/output error',
  44: 'ENOENT: no such file or directory',
  51: 'ENOSPC: no space left on device',
  63: 'EPERM: operation not permitted',
  69: 'EROFS: read-only file system',
};

/** What crosses back to the main thread of an error: its message and PostgreSQL's fields. */
function describe(err: unknown): Record<string, unknown> {
  const e = err as { message?: unknown; code?: unknown; detail?: unknown; constraint?: unknown; errno?: unknown };
  if (typeof e?.message !== 'string' && typeof e?.errno === 'number') {
    const known = WASI_ERRNO[e.errno];
    return { message: `${known ?? `file system error ${e.errno}`} (in ${dir})`, code: known?.split(':')[0] };
  }
  return { message: typeof e?.message === 'string' ? e.message : String(err), code: e?.code, detail: e?.detail, constraint: e?.constraint };
}

void main();
