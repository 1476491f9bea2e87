/**
 * Every environment variable the config reads (README's environment table; test/env-doc.test.ts keeps the three in
 * step). A `GW_*` variable not among them is most likely a misspelt one, which would otherwise be ignored silently.
 */
export const ENVIRONMENT_VARIABLES = [
  'PORT',
  'HOST',
  'GW_CONFIG',
  'DATABASE_URL',
  'GW_DATA_DIR',
  'REDIS_URL',
  'GW_ADMIN_TOKEN',
  'GW_SECRET',
  'GW_REGISTRY_INTERVAL_S',
  'GW_BODY_LIMIT_BYTES',
  'GW_BODY_MEMORY_MB',
  'GW_UPLOAD_LIMIT_BYTES',
  'GW_UPLOAD_DIR',
  'GW_LOG_LEVEL',
  'GW_LOG_BUFFER_KB',
  'GW_SHUTDOWN_TIMEOUT_MS',
  'GW_REQUEST_TIMEOUT_MS',
  'GW_SEND_TIMEOUT_MS',
  'GW_KEEP_ALIVE_TIMEOUT_MS',
  'GW_TRUST_PROXY',
  'GW_KEY_CACHE_TTL_MS',
  'GW_CIRCUIT_FAILURES',
  'GW_CIRCUIT_OPEN_MS',
  'GW_ROUTING_REMEASURE_MS',
  'GW_IDEMPOTENCY_WAIT_MS',
  'GW_IDEMPOTENCY_CLAIM_TTL_MS',
  'GW_IDEMPOTENCY_KEPT_MB',
  'GW_STREAM_GRACE_S',
  'GW_STREAM_MEMORY_MB',
  'GW_STREAM_HEARTBEAT_MS',
] as const;

/** A `GW_*` variable the gateway does not read, with the known ones it most likely meant (none when nothing is close). */
export interface UnknownVariable {
  name: string;
  meant: string[];
}

/**
 * The `GW_*` variables set that the gateway does not read, except those the config file names (`${GW_MISTRAL_KEY}`).
 * Names only: a value may be a secret.
 */
export function unknownGwVariables(env: NodeJS.ProcessEnv, referenced: ReadonlySet<string>): UnknownVariable[] {
  const known = ENVIRONMENT_VARIABLES.filter((v) => v.startsWith('GW_'));
  const unknown: UnknownVariable[] = [];
  for (const name of Object.keys(env).sort()) {
    if (!name.startsWith('GW_') || referenced.has(name) || (known as readonly string[]).includes(name)) continue;
    unknown.push({ name, meant: closest(name, known) });
  }
  return unknown;
}

/** The known names within an edit distance of 2 (the nearest), else those the name is a prefix of or starts with. */
function closest(name: string, known: readonly string[]): string[] {
  let best = 3;
  let meant: string[] = [];
  for (const k of known) {
    const d = editDistance(name, k);
    if (d < best) [best, meant] = [d, [k]];
    else if (d === best) meant.push(k);
  }
  if (meant.length > 0) return meant;
  // `GW_` alone, or `GW_S`, is a prefix of too much to say anything.
  if (name.length < 'GW_'.length + 3) return [];
  return known.filter((k) => k.startsWith(name) || name.startsWith(k));
}

/** Levenshtein distance (names are short, and this runs once at start). */
function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      row[j] = Math.min((previous[j] ?? 0) + 1, (row[j - 1] ?? 0) + 1, (previous[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    previous = row;
  }
  return previous[b.length] ?? 0;
}
