/**
 * Whether a store error is the database refusing work for now rather than a fault of the statement: it is in
 * read-only mode (a standby after a failover, `default_transaction_read_only` for maintenance), out of disk, memory
 * or connection slots, shutting down or starting, or it cancelled the statement at its `statement_timeout`. A ping
 * still answers then, but the call is worth retrying (503), not a gateway fault (500).
 */
export function databaseRefusing(err: unknown): boolean {
  const code = sqlState(err) ?? sqlState((err as { cause?: unknown } | null)?.cause);
  if (code === null) return false;
  return code === '25006' || code === '57014' || code.startsWith('53') || code.startsWith('57P') || code.startsWith('08');
}

/** PostgreSQL's SQLSTATE: five characters, where Node's own errors carry names (`ECONNREFUSED`). */
function sqlState(err: unknown): string | null {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : null;
}
