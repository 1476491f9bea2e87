import { accessSync, constants, readdirSync, readFileSync } from 'node:fs';
import { delimiter, join } from 'node:path';

/** Finds an executable on PATH (or returns null). */
export function which(name: string): string | null {
  for (const dir of (process.env['PATH'] ?? '').split(delimiter)) {
    if (dir === '') continue;
    const candidate = join(dir, name);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return null;
}

function isExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** `redis-server` on PATH, or `$GW_REDIS_SERVER`. */
export function findRedisServer(): string | null {
  const override = process.env['GW_REDIS_SERVER'];
  if (override !== undefined && override !== '') return isExecutable(override) ? override : null;
  return which('redis-server');
}

const PG_TOOLS = ['initdb', 'postgres', 'pg_isready', 'psql'] as const;

/**
 * The directory holding `initdb`, `postgres`, `pg_isready` and `psql`:
 * `$GW_PG_BIN` if set, else the newest `/usr/lib/postgresql/<version>/bin`
 * (Debian, Ubuntu), else the directory of `initdb` on PATH.
 */
export function findPostgresBinDir(): string | null {
  const hasAll = (dir: string) => PG_TOOLS.every((tool) => isExecutable(join(dir, tool)));
  const override = process.env['GW_PG_BIN'];
  if (override !== undefined && override !== '') return hasAll(override) ? override : null;
  let versions: string[] = [];
  try {
    versions = readdirSync('/usr/lib/postgresql').filter((v) => /^\d+(\.\d+)?$/.test(v));
  } catch {
    // not a Debian-style layout
  }
  versions.sort((a, b) => Number.parseFloat(b) - Number.parseFloat(a));
  for (const version of versions) {
    const dir = join('/usr/lib/postgresql', version, 'bin');
    if (hasAll(dir)) return dir;
  }
  const initdb = which('initdb');
  if (initdb !== null) {
    const dir = initdb.slice(0, initdb.length - '/initdb'.length);
    if (hasAll(dir)) return dir;
  }
  return null;
}

export interface UnixUser {
  uid: number;
  gid: number;
}

/** Looks a user up in /etc/passwd (Node has no getpwnam). */
export function lookupUser(name: string): UnixUser | null {
  let passwd: string;
  try {
    passwd = readFileSync('/etc/passwd', 'utf8');
  } catch {
    return null;
  }
  for (const line of passwd.split('\n')) {
    const fields = line.split(':');
    if (fields[0] === name && fields.length >= 4) {
      const uid = Number(fields[2]);
      const gid = Number(fields[3]);
      if (Number.isInteger(uid) && Number.isInteger(gid)) return { uid, gid };
    }
  }
  return null;
}

export function isRoot(): boolean {
  return typeof process.getuid === 'function' && process.getuid() === 0;
}

/**
 * PostgreSQL refuses to run as root; as root the testkit runs it as this
 * user (the `postgres` user that Debian's package creates). Null when not
 * running as root.
 */
export function postgresRunAs(): UnixUser | null | 'missing' {
  if (!isRoot()) return null;
  return lookupUser(process.env['GW_PG_USER'] ?? 'postgres') ?? 'missing';
}

export function haveRedis(): boolean {
  return findRedisServer() !== null;
}

export function havePostgres(): boolean {
  return findPostgresBinDir() !== null && postgresRunAs() !== 'missing';
}

/** True when the environment says it is a CI run (`CI=true` or `CI=1`). */
export function isCI(): boolean {
  const ci = (process.env['CI'] ?? '').trim().toLowerCase();
  return ci === 'true' || ci === '1' || ci === 'yes';
}

export type KnownService = 'redis' | 'postgres';

interface Availability {
  ok: boolean;
  what: string;
  detail: string;
  install: string;
}

function availability(name: string): Availability {
  if (name === 'redis' || name === 'redis-server') {
    return {
      ok: haveRedis(),
      what: 'Redis (redis-server)',
      detail: 'looked for redis-server on PATH (override: GW_REDIS_SERVER=/path/to/redis-server)',
      install: 'apt-get install -y redis-server',
    };
  }
  if (name === 'postgres' || name === 'postgresql') {
    const dir = findPostgresBinDir();
    const runAs = postgresRunAs();
    return {
      ok: dir !== null && runAs !== 'missing',
      what: 'PostgreSQL (initdb, postgres, pg_isready, psql)',
      detail:
        dir === null
          ? 'looked in /usr/lib/postgresql/<version>/bin and on PATH (override: GW_PG_BIN=/dir)'
          : `found ${dir}, but running as root and there is no 'postgres' user to run it as (override: GW_PG_USER)`,
      install: 'apt-get install -y postgresql',
    };
  }
  return {
    ok: which(name) !== null,
    what: name,
    detail: `looked for ${name} on PATH`,
    install: `install ${name}`,
  };
}

const warned = new Set<string>();

/** Thrown by {@link requireBinary} under CI when a binary is missing. */
export class MissingBinaryError extends Error {
  override readonly name = 'MissingBinaryError';
}

/**
 * Checks that a server binary the tests need is installed.
 *
 * - present: returns true;
 * - missing, not CI: prints a loud banner on stderr (once per name and
 *   process) and returns false, so the caller can `describe.skipIf(!ok)`;
 * - missing with `CI=true`: throws {@link MissingBinaryError}, which fails
 *   the test file (call it at the top level of the file).
 *
 * `name` is `'redis'`, `'postgres'`, or any executable looked up on PATH.
 */
export function requireBinary(name: KnownService | (string & {}), usedBy?: string): boolean {
  const a = availability(name);
  if (a.ok) return true;
  const lines = [
    `${a.what} is NOT INSTALLED${usedBy === undefined ? '' : ` (needed by ${usedBy})`}`,
    a.detail,
    `install it with: ${a.install}   (or run .ci/run, which installs everything)`,
    isCI() ? 'CI=true: this FAILS the run.' : 'The suites that need it are SKIPPED. With CI=true this fails the run.',
  ];
  const bar = '!'.repeat(78);
  const banner = ['', bar, ...lines.map((l) => `!!! ${l}`), bar, ''].join('\n');
  if (isCI()) throw new MissingBinaryError(banner);
  if (!warned.has(name)) {
    warned.add(name);
    console.error(banner);
  }
  return false;
}
