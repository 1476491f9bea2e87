import { execFile } from 'node:child_process';
import { chownSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findPostgresBinDir, postgresRunAs } from './binaries.js';
import { freePort } from './ports.js';
import { cleanEnv, ManagedProcess, removeDir, trackDir, waitUntilReady } from './process.js';

export interface PostgresServer {
  /** `postgres://postgres@127.0.0.1:PORT/postgres` (trust auth, no password). */
  url: string;
  port: number;
  /** pid of the current postmaster (changes on restart). */
  readonly pid: number;
  /** Fast shutdown (SIGINT), wait for exit, remove the temp dir. Idempotent. */
  stop(): Promise<void>;
  /** SIGKILL to the postmaster and its backends (a crash); down until restart(). */
  kill(): Promise<void>;
  /** SIGSTOP to the postmaster and every backend: connections stay open, nothing answers. */
  pause(): void;
  /** SIGCONT */
  resume(): void;
  /** Stops it, runs a fresh initdb and starts again on the same port: every database is gone. */
  restart(): Promise<void>;
  /**
   * Creates an empty database (a unique name unless given) and returns its
   * url, so that each test suite owns its own.
   */
  createDatabase(name?: string): Promise<string>;
  /** Runs SQL with psql (`-At`: unaligned, tuples only) and returns its stdout. */
  psql(sql: string, database?: string): Promise<string>;
  /** `pg_isready`: true when it accepts connections within `timeoutS` seconds (libpq's minimum is 2). */
  isReady(timeoutS?: number): Promise<boolean>;
}

const READY_TIMEOUT_MS = 30_000;
let dbCounter = 0;

function run(
  file: string,
  args: string[],
  opts: { cwd?: string; uid?: number; gid?: number; timeoutMs?: number } = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      file,
      args,
      {
        env: cleanEnv(),
        timeout: opts.timeoutMs ?? 30_000,
        ...(opts.cwd === undefined ? {} : { cwd: opts.cwd }),
        ...(opts.uid === undefined ? {} : { uid: opts.uid }),
        ...(opts.gid === undefined ? {} : { gid: opts.gid }),
      },
      (err, stdout, stderr) => {
        const code = err === null ? 0 : typeof err.code === 'number' ? err.code : 1;
        resolve({ code, stdout: String(stdout), stderr: String(stderr) || (err?.message ?? '') });
      },
    );
  });
}

/**
 * Starts a throwaway PostgreSQL on a free loopback port: `initdb` into a temp
 * dir, then `postgres` with fsync off and trust auth. As root both run as the
 * `postgres` user (PostgreSQL refuses root), in a temp dir that user owns.
 */
export async function startPostgres(): Promise<PostgresServer> {
  const binDir = findPostgresBinDir();
  if (binDir === null) throw new Error('PostgreSQL is not installed (apt-get install -y postgresql)');
  const runAs = postgresRunAs();
  if (runAs === 'missing') throw new Error("running as root, but there is no 'postgres' user to run PostgreSQL as");
  const ids = runAs === null ? {} : { uid: runAs.uid, gid: runAs.gid };
  const bin = (tool: string) => join(binDir, tool);

  const dir = mkdtempSync(join(tmpdir(), 'gw-pg-'));
  trackDir(dir);
  if (runAs !== null) chownSync(dir, runAs.uid, runAs.gid);
  const dataDir = join(dir, 'data');

  const initdb = async () => {
    await run('rm', ['-rf', dataDir]);
    const r = await run(bin('initdb'), ['-D', dataDir, '-U', 'postgres', '-A', 'trust', '-E', 'UTF8', '--locale=C', '--no-sync'], {
      cwd: dir,
      ...ids,
      timeoutMs: 60_000,
    });
    if (r.code !== 0) throw new Error(`initdb failed (exit ${r.code}):\n${r.stderr}\n${r.stdout}`);
  };

  const isReady = async (port: number, timeoutS = 2) => {
    const args = ['-q', '-h', '127.0.0.1', '-p', String(port), '-U', 'postgres', '-d', 'postgres', '-t', String(timeoutS)];
    return (await run(bin('pg_isready'), args)).code === 0;
  };

  const launch = async (port: number): Promise<ManagedProcess> => {
    const proc = new ManagedProcess(
      bin('postgres'),
      [
        '-D',
        dataDir,
        '-p',
        String(port),
        '-k',
        dir,
        '-c',
        'listen_addresses=127.0.0.1',
        '-c',
        'fsync=off',
        '-c',
        'synchronous_commit=off',
        '-c',
        'full_page_writes=off',
        '-c',
        'shared_buffers=32MB',
        '-c',
        'max_connections=100',
        '-c',
        'lc_messages=C',
        '-c',
        'log_min_messages=warning',
      ],
      { cwd: dir, logFile: join(dir, 'postgres.log'), ...ids },
    );
    await waitUntilReady(`postgres on port ${port}`, proc, () => isReady(port), READY_TIMEOUT_MS);
    return proc;
  };

  let port = 0;
  let proc: ManagedProcess | undefined;
  try {
    await initdb();
    // Another process may grab the free port before postgres binds it: retry on a new one.
    for (let attempt = 1; proc === undefined; attempt++) {
      port = await freePort();
      try {
        proc = await launch(port);
      } catch (err) {
        if (attempt >= 3) throw err;
      }
    }
  } catch (err) {
    removeDir(dir);
    throw err;
  }

  const psql = async (sql: string, database = 'postgres') => {
    const conninfo = `host=127.0.0.1 port=${port} user=postgres dbname=${database} connect_timeout=5`;
    const r = await run(bin('psql'), ['-X', '-q', '-At', '-v', 'ON_ERROR_STOP=1', '-d', conninfo, '-c', sql]);
    if (r.code !== 0) throw new Error(`psql failed (exit ${r.code}): ${r.stderr.trim()}`);
    return r.stdout;
  };

  let current: ManagedProcess = proc;
  let stopped = false;
  const server: PostgresServer = {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    get pid() {
      return current.pid;
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      await current.stop('SIGINT');
      removeDir(dir);
    },
    async kill() {
      await current.kill();
    },
    pause() {
      current.signalTree('SIGSTOP');
    },
    resume() {
      current.signalTree('SIGCONT');
    },
    async restart() {
      if (stopped) throw new Error('restart() after stop()');
      await current.stop('SIGINT');
      await initdb();
      current = await launch(port);
    },
    async createDatabase(name?: string) {
      const db = name ?? `t_${process.pid}_${++dbCounter}_${Math.random().toString(36).slice(2, 8)}`;
      if (!/^[a-z_][a-z0-9_]{0,62}$/.test(db)) throw new Error(`createDatabase: invalid name ${JSON.stringify(db)}`);
      await psql(`CREATE DATABASE "${db}"`);
      return `postgres://postgres@127.0.0.1:${port}/${db}`;
    },
    psql,
    isReady(timeoutS = 2) {
      return isReady(port, timeoutS);
    },
  };
  return server;
}
