import { orm } from './drizzle-cjs.js';
import type { Db } from './drizzle-store.js';
import { inMs, wholeMs } from './sql-time.js';
import type { BudgetLeaseRepo } from './types.js';

const { sql } = orm;

/** node-postgres answers { rows }, the embedded database thread's client the rows themselves. */
function rowsOf<T>(result: unknown): T[] {
  return ((Array.isArray(result) ? result : (result as { rows?: unknown[] }).rows) ?? []) as T[];
}

/** Budget leases in the database: the migrations' `gw_budget_lease_grow` checks and grants in one call. */
export class DrizzleBudgetLeaseRepo implements BudgetLeaseRepo {
  constructor(private readonly db: Db) {}

  async grow(scopeId: string, leaseId: string, minNano: number, maxNano: number, ttlMs: number, slackNano = 0): Promise<number> {
    const result = await this.db.execute(
      sql`SELECT gw_budget_lease_grow(${scopeId}, ${leaseId}, ${minNano}::bigint, ${maxNano}::bigint, ${wholeMs(ttlMs)}::integer, ${slackNano}::bigint) AS granted`,
    );
    const [row] = rowsOf<{ granted: string | number }>(result);
    return Number(row?.granted ?? 0);
  }

  async shrink(scopeId: string, leaseId: string, nano: number, ttlMs: number): Promise<boolean> {
    const result = await this.db.execute(
      sql`UPDATE budget_leases SET nano = greatest(nano - ${nano}::bigint, 0), expires_at = ${inMs(ttlMs)}
        WHERE scope_id = ${scopeId} AND lease_id = ${leaseId} AND expires_at > now() RETURNING 1 AS kept`,
    );
    return rowsOf(result).length > 0;
  }

  async add(scopeId: string, leaseId: string, nano: number, ttlMs: number): Promise<void> {
    await this.db.execute(
      sql`INSERT INTO budget_leases (scope_id, lease_id, nano, expires_at) VALUES (${scopeId}, ${leaseId}, ${nano}::bigint, ${inMs(ttlMs)})
        ON CONFLICT (scope_id, lease_id) DO UPDATE SET expires_at = EXCLUDED.expires_at,
          nano = CASE WHEN budget_leases.expires_at > now() THEN budget_leases.nano ELSE 0 END + EXCLUDED.nano`,
    );
  }

  async live(scopeId: string): Promise<{ nano: number; ms: number }> {
    const result = await this.db.execute(
      sql`SELECT coalesce(sum(nano), 0) AS nano, coalesce(ceil(extract(epoch FROM max(expires_at) - now()) * 1000), 0) AS ms
        FROM budget_leases WHERE scope_id = ${scopeId} AND expires_at > now()`,
    );
    const [row] = rowsOf<{ nano: string | number; ms: string | number }>(result);
    return { nano: Number(row?.nano ?? 0), ms: Math.max(0, Number(row?.ms ?? 0)) };
  }

  async sweepExpired(limit: number): Promise<number> {
    // SKIP LOCKED: sweeps of several instances at once, and a grow deleting its scope's expired rows, never wait on
    // one another. The outer check is the row as locked: one renewed meanwhile (a shrink) is kept.
    const result = await this.db.execute(
      sql`DELETE FROM budget_leases WHERE (scope_id, lease_id) IN (
          SELECT scope_id, lease_id FROM budget_leases WHERE expires_at <= now() LIMIT ${limit}::integer FOR UPDATE SKIP LOCKED)
        AND expires_at <= now() RETURNING 1 AS gone`,
    );
    return rowsOf(result).length;
  }
}
