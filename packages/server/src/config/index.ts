import { accessSync, constants } from 'node:fs';
import { isIP } from 'node:net';
import type { GatewayFileConfig } from '@gw/schema';
import { makeDirSync } from '../lib/make-dir.js';
import { ConfigError } from './config-error.js';
import { type UnknownVariable, unknownGwVariables } from './env-names.js';
import { headerUnsafe } from './header-safe.js';
import { loadConfigFile } from './load-file.js';

export { ConfigError } from './config-error.js';
export { ENVIRONMENT_VARIABLES, type UnknownVariable } from './env-names.js';
export { parseConfigText } from './load-file.js';

/** Everything the process reads from outside, validated once at start and frozen. */
export interface GatewayConfig {
  readonly host: string;
  readonly port: number;
  readonly configFile: string | null;
  /** null: demo mode (simulated providers and the demo catalogue). */
  readonly file: GatewayFileConfig | null;
  readonly databaseUrl: string | null;
  readonly dataDir: string;
  readonly redisUrl: string | null;
  readonly adminToken: string | null;
  readonly secret: string | null;
  readonly registryIntervalS: number;
  /** Largest JSON request body, bytes. */
  readonly bodyLimitBytes: number;
  /** Largest multipart upload (audio file), bytes; uploads are spooled to disk, never held in memory. */
  readonly uploadLimitBytes: number;
  /** Where uploads are spooled while a request is in flight (null: the OS temp dir). */
  readonly uploadDir: string | null;
  readonly logLevel: string;
  /** The most log output, in KiB, waiting in memory for a stdout that takes it slowly; past it lines are dropped. */
  readonly logBufferKb: number;
  /** How long a client may take to send its whole request (headers and body); past it, 408 and the connection is closed. */
  readonly requestTimeoutMs: number;
  /** How long an idle kept-alive client connection stays open: above the idle timeout of any balancer in front. */
  readonly keepAliveTimeoutMs: number;
  /** Whom X-Forwarded-For is taken from for the client's address in the log: the proxies' hop count or addresses; null: no one. */
  readonly trustProxy: number | readonly string[] | null;
  /** How long an answer written whole may wait for its client to take any of it before the connection is closed. */
  readonly sendTimeoutMs: number;
  /** How long a SIGTERM waits for in-flight requests. */
  readonly shutdownTimeoutMs: number;
  /** How long a cached key is trusted before it is re-read from the store. */
  readonly keyCacheTtlMs: number;
  /** How long a stream whose client left is still read from upstream (and resumable). */
  readonly streamGraceS: number;
  /** The most JSON request bodies, in MiB, held at once (0: a sixteenth of V8's heap limit; http/body-memory.ts). */
  readonly bodyMemoryMb: number;
  /** The most event data, in MiB, all streams together keep in this instance's memory (docs/streaming.md, Memory). */
  readonly streamMemoryMb: number;
  /** The longest silence on a stream before an SSE comment is sent. */
  readonly streamHeartbeatMs: number;
  /** Failures in a row that open an offer's circuit (docs/routing.md). */
  readonly circuitFailures: number;
  /** How long an open circuit keeps its offer out of every plan before a probe may try it. */
  readonly circuitOpenMs: number;
  /** How long an offer may go unmeasured before `fastest`/`best` re-measure it. */
  readonly remeasureMs: number;
  /** How long a concurrent repeat of an idempotent request waits for the first one's answer before its 409. */
  readonly idempotencyWaitMs: number;
  /** How long an idempotency claim outlives a crashed instance. */
  readonly idempotencyClaimTtlMs: number;
  /** The most answer data, in MiB, kept for repeats of one API key's keyed requests over 24 hours (per instance). */
  readonly idempotencyKeptMb: number;
  /** `GW_*` variables set that none of the above reads nor the config file names: most likely misspelt (warned of at start). */
  readonly unknownVariables: readonly UnknownVariable[];
}

function int(env: NodeJS.ProcessEnv, name: string, fallback: number, min: number, max: number): number {
  const raw = str(env, name);
  if (raw === null) return fallback;
  // Plain decimal digits only: Number() also takes hex (0x50), exponents (1e3), fractions (80.0) and signs.
  const digits = raw.trim();
  const n = /^[0-9]+$/.test(digits) ? Number(digits) : Number.NaN;
  if (!Number.isSafeInteger(n) || n < min || n > max)
    throw new ConfigError('environment', name, `an integer from ${min} to ${max}, not ${JSON.stringify(raw)}`);
  return n;
}

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

function logLevel(env: NodeJS.ProcessEnv): string {
  const level = str(env, 'GW_LOG_LEVEL') ?? 'info';
  if (!LOG_LEVELS.includes(level)) throw new ConfigError('environment', 'GW_LOG_LEVEL', `one of ${LOG_LEVELS.join(', ')}, not ${JSON.stringify(level)}`);
  return level;
}

/**
 * A directory the gateway writes to: made if missing, and checked now rather than at the first upload. Set but empty
 * stops the start, as GW_CONFIG does: a deploy file's variable left unfilled put the embedded store in ./data of
 * whatever directory the gateway ran in, where a container loses it.
 */
function writableDir(env: NodeJS.ProcessEnv, name: string, unsetMeans: string): string | null {
  refuseSetButEmpty(env, name, `a directory the gateway can create and write to (it is set but empty; unset it for ${unsetMeans})`);
  const dir = str(env, name);
  if (dir === null) return null;
  try {
    makeDirSync(dir);
    accessSync(dir, constants.W_OK);
  } catch (err) {
    throw new ConfigError(
      'environment',
      name,
      `a directory the gateway can create and write to, not ${JSON.stringify(dir)} (${(err as { code?: string }).code ?? String(err)})`,
    );
  }
  return dir;
}

/** Host name labels: letters, digits, `-` and (as container names have them) `_`. */
const HOST_NAME = /^[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?$/;

/**
 * The listen address, trimmed as numbers are. A URL, a port or brackets (`http://0.0.0.0`, `127.0.0.1:8080`, `[::1]`)
 * failed only at listen, with exit code 1, after the store was opened; a name that does not resolve still fails there.
 */
function host(env: NodeJS.ProcessEnv): string {
  const raw = str(env, 'HOST');
  if (raw === null) return '127.0.0.1';
  const h = raw.trim();
  if (isIP(h) !== 0 || (h.length <= 253 && HOST_NAME.test(h))) return h;
  throw new ConfigError('environment', 'HOST', `an IP address or host name to listen on (no scheme, port or brackets), not ${JSON.stringify(raw)}`);
}

/** The names proxy-addr (Fastify's trustProxy) gives address ranges: 127.0.0.0/8 and ::1, link-local, private. */
const PROXY_RANGE_NAMES = ['loopback', 'linklocal', 'uniquelocal'];

/**
 * GW_TRUST_PROXY: how many proxies in front append to X-Forwarded-For, or which addresses are theirs. Checked here,
 * where Fastify's own check threw from deep in its start with a stack trace. `true` (any sender's X-Forwarded-For)
 * is not offered: its first entry is whatever the client wrote.
 */
function trustProxy(env: NodeJS.ProcessEnv): number | readonly string[] | null {
  const raw = str(env, 'GW_TRUST_PROXY');
  if (raw === null) return null;
  const expected = `the number of proxies in front (1 to 32) or a comma-separated list of their addresses, CIDR ranges (10.0.0.0/8) and ${PROXY_RANGE_NAMES.join(', ')}, not ${JSON.stringify(raw)}`;
  const v = raw.trim();
  if (/^[0-9]+$/.test(v)) {
    const hops = Number(v);
    if (hops < 1 || hops > 32) throw new ConfigError('environment', 'GW_TRUST_PROXY', expected);
    return hops;
  }
  const entries = v.split(',').map((e) => e.trim());
  for (const entry of entries) {
    if (PROXY_RANGE_NAMES.includes(entry)) continue;
    const [address = '', prefix, extra] = entry.split('/');
    const family = isIP(address);
    const bits = family === 4 ? 32 : 128;
    const prefixOk = prefix === undefined || (/^[0-9]{1,3}$/.test(prefix) && Number(prefix) <= bits);
    if (family === 0 || extra !== undefined || !prefixOk) throw new ConfigError('environment', 'GW_TRUST_PROXY', expected);
  }
  return Object.freeze(entries);
}

/** A variable's value; null when unset, empty or blank (a number, a host or a level then takes its default). */
function str(env: NodeJS.ProcessEnv, name: string): string | null {
  const v = env[name];
  return v === undefined || v.trim() === '' ? null : v;
}

/** GW_DATA_DIR beside PostgreSQL (where refused usage records wait): made when needed, but never set but empty. */
function dataDirWithDatabase(env: NodeJS.ProcessEnv): string | null {
  refuseSetButEmpty(env, 'GW_DATA_DIR', 'a directory (it is set but empty; unset it for ./data)');
  return str(env, 'GW_DATA_DIR');
}

/** A variable set to nothing but white space: a mistake (a deploy file's variable left unfilled), not a wish to leave it unset. */
function refuseSetButEmpty(env: NodeJS.ProcessEnv, name: string, expected: string): void {
  if (env[name] !== undefined && env[name].trim() === '') throw new ConfigError('environment', name, expected);
}

/**
 * A URL of one of `schemes` that parses (a bad port or host fails here, named, rather than at connect time).
 * Set but empty (`DATABASE_URL=${DATABASE_URL}` in a deploy file whose variable is missing) stops the start, as for
 * GW_CONFIG: taken as unset, it ran on the embedded store or the in-process limiter the operator meant to leave.
 */
function url(env: NodeJS.ProcessEnv, name: string, schemes: RegExp, expected: string, unsetMeans: string): string | null {
  const raw = env[name];
  if (raw !== undefined && raw.trim() === '') throw new ConfigError('environment', name, `${expected} (it is set but empty; unset it for ${unsetMeans})`);
  const v = str(env, name);
  if (v === null) return null;
  if (!schemes.test(v)) throw new ConfigError('environment', name, expected);
  try {
    new URL(v);
  } catch {
    // libpq's `postgres://user@/db?host=/run/postgresql` (a user, no host): WHATWG URLs take no user without a host.
    const socket = /^postgres(ql)?:\/\/[^/?#]*@\//.test(v)
      ? '; for a Unix socket, give its directory percent-encoded as the host (postgres://user@%2Frun%2Fpostgresql/db) or leave the host and user out (postgres:///db?host=/run/postgresql&user=user)'
      : '';
    throw new ConfigError(
      'environment',
      name,
      `${expected} that parses (check its host, port and any special characters in the password, which must be percent-encoded${socket})`,
    );
  }
  return v;
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): GatewayConfig {
  // Set but empty (an unset variable in a deploy script) is a mistake, not a request for the demo catalogue.
  refuseSetButEmpty(env, 'GW_CONFIG', 'a config file path (it is set but empty; unset it for demo mode)');
  const configFile = str(env, 'GW_CONFIG');
  const databaseUrl = url(env, 'DATABASE_URL', /^postgres(ql)?:\/\//, 'a postgres:// URL', 'the embedded store in GW_DATA_DIR');
  const redisUrl = url(env, 'REDIS_URL', /^rediss?:\/\//, 'a redis:// URL', 'the in-process limiter of a single instance');
  // Redis reads the path as the database number: any other (`/cache`, `/x`) crashed the start with a bare stack trace
  // of Redis's reply to SELECT NaN.
  if (redisUrl !== null && !/^(\/\d*)?$/.test(new URL(redisUrl).pathname))
    throw new ConfigError('environment', 'REDIS_URL', 'a redis:// URL whose path, if any, is a database number (/0, /1, …)');
  // Set but empty (`GW_ADMIN_TOKEN=` in a unit file, a template's variable left unfilled) stops the start as the URLs
  // do: taken as unset, the admin API was off and every admin call a 404, or the secret a generated one, which signs
  // nothing the operator can check, with no word why.
  refuseSetButEmpty(env, 'GW_ADMIN_TOKEN', 'a token of at least 16 characters (it is set but empty; unset it to leave the admin API off)');
  refuseSetButEmpty(env, 'GW_SECRET', 'at least 32 characters (it is set but empty; unset it to have one generated and kept in the store)');
  const adminToken = str(env, 'GW_ADMIN_TOKEN');
  if (adminToken !== null && adminToken.length < 16) throw new ConfigError('environment', 'GW_ADMIN_TOKEN', 'at least 16 characters');
  const unsendable = adminToken === null ? null : headerUnsafe(adminToken);
  if (unsendable !== null) throw new ConfigError('environment', 'GW_ADMIN_TOKEN', `a token an Authorization header can carry, without ${unsendable}`);
  const secret = str(env, 'GW_SECRET');
  if (secret !== null && secret.length < 32) throw new ConfigError('environment', 'GW_SECRET', 'at least 32 characters (it keys every HMAC the gateway signs)');
  // Filled as the file is read (below), before the unknown variables are told apart from those it names.
  const referenced = new Set<string>();
  return Object.freeze({
    host: host(env),
    port: int(env, 'PORT', 8080, 0, 65535),
    configFile,
    file: configFile ? Object.freeze(loadConfigFile(configFile, env, referenced)) : null,
    databaseUrl,
    // Embedded, it holds the database; with PostgreSQL, only usage records the database refused (made when needed).
    dataDir: databaseUrl ? (dataDirWithDatabase(env) ?? './data') : (writableDir(env, 'GW_DATA_DIR', './data') ?? './data'),
    redisUrl,
    adminToken,
    secret,
    // At most what a Node timer can wait (2^31 - 1 ms, about 24.8 days): a longer one would fire at once, every millisecond.
    registryIntervalS: int(env, 'GW_REGISTRY_INTERVAL_S', 21_600, 1, 2_147_483),
    bodyLimitBytes: int(env, 'GW_BODY_LIMIT_BYTES', 4 * 1024 * 1024, 1024, 1024 * 1024 * 1024),
    bodyMemoryMb: int(env, 'GW_BODY_MEMORY_MB', 0, 0, 1_048_576),
    uploadLimitBytes: int(env, 'GW_UPLOAD_LIMIT_BYTES', 25 * 1024 * 1024, 1024, 4 * 1024 * 1024 * 1024),
    uploadDir: writableDir(env, 'GW_UPLOAD_DIR', 'the OS temp dir'),
    logLevel: logLevel(env),
    logBufferKb: int(env, 'GW_LOG_BUFFER_KB', 8192, 16, 1_048_576),
    // At least a second: under it, the drain's own steps (a 200 ms grace for requests already sent, the last usage write,
    // which takes up to a second) could not end in time, and even an idle instance exited 1, its last records unwritten.
    shutdownTimeoutMs: int(env, 'GW_SHUTDOWN_TIMEOUT_MS', 30_000, 1_000, 600_000),
    requestTimeoutMs: int(env, 'GW_REQUEST_TIMEOUT_MS', 120_000, 1_000, 3_600_000),
    sendTimeoutMs: int(env, 'GW_SEND_TIMEOUT_MS', 60_000, 1_000, 3_600_000),
    keepAliveTimeoutMs: int(env, 'GW_KEEP_ALIVE_TIMEOUT_MS', 72_000, 1_000, 3_600_000),
    trustProxy: trustProxy(env),
    keyCacheTtlMs: int(env, 'GW_KEY_CACHE_TTL_MS', 30_000, 0, 3_600_000),
    streamGraceS: int(env, 'GW_STREAM_GRACE_S', 300, 0, 86_400),
    streamMemoryMb: int(env, 'GW_STREAM_MEMORY_MB', 256, 1, 1_048_576),
    streamHeartbeatMs: int(env, 'GW_STREAM_HEARTBEAT_MS', 10_000, 100, 15_000),
    circuitFailures: int(env, 'GW_CIRCUIT_FAILURES', 5, 1, 1_000_000),
    circuitOpenMs: int(env, 'GW_CIRCUIT_OPEN_MS', 30_000, 10, 3_600_000),
    remeasureMs: int(env, 'GW_ROUTING_REMEASURE_MS', 30_000, 10, 3_600_000),
    idempotencyWaitMs: int(env, 'GW_IDEMPOTENCY_WAIT_MS', 10_000, 0, 600_000),
    idempotencyClaimTtlMs: int(env, 'GW_IDEMPOTENCY_CLAIM_TTL_MS', 60_000, 100, 3_600_000),
    idempotencyKeptMb: int(env, 'GW_IDEMPOTENCY_KEPT_MB', 256, 1, 1_048_576),
    unknownVariables: unknownGwVariables(env, referenced),
  });
}
