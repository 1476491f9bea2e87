import { orm } from './drizzle-cjs.js';
import type { Db } from './drizzle-store.js';
import type { BudgetHoldRepo } from './types.js';

const { sql } = orm;

/** Budget holds in the database (the migration's `gw_budget_reserve` does a reservation's check and hold in one call). */
export class DrizzleBudgetHoldRepo implements BudgetHoldRepo {
  constructor(private readonly db: Db) {}

  async reserve(scopeIds: string[], nano: number, requestId: string, ttlMs: number): Promise<string | null> {
    const ws = scopeIds.filter((s) => s.startsWith('ws:')).map((s) => s.slice(3));
    const keys = scopeIds.filter((s) => s.startsWith('key:')).map((s) => s.slice(4));
    const result = await this.db.execute(
      sql`SELECT gw_budget_reserve(${sql.param(ws)}::text[], ${sql.param(keys)}::text[], ${nano}::bigint, ${requestId}, ${Math.max(1, Math.round(ttlMs))}::integer) AS refused`,
    );
    // node-postgres answers { rows }, the embedded database thread's client the rows themselves.
    const rows = (Array.isArray(result) ? result : (result as { rows?: unknown[] }).rows) as { refused: string | null }[] | undefined;
    return rows?.[0]?.refused ?? null;
  }

  async settle(requestId: string, nano: number): Promise<void> {
    if (nano > 0) await this.db.execute(sql`UPDATE budget_holds SET nano = ${nano}::bigint WHERE request_id = ${requestId}`);
    else await this.db.execute(sql`DELETE FROM budget_holds WHERE request_id = ${requestId}`);
  }
}
