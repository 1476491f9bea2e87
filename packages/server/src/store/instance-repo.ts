import { orm } from './drizzle-cjs.js';
import type { Db } from './drizzle-store.js';
import { gatewayInstances } from './schema.js';
import { inMs } from './sql-time.js';
import type { InstanceRepo } from './types.js';

const { and, eq, gt, sql } = orm;

/** Instances' word that they are alive, by the database's clock (store/schema.ts gatewayInstances). */
export class DrizzleInstanceRepo implements InstanceRepo {
  constructor(private readonly db: Db) {}

  async sayAlive(id: string, ttlMs: number): Promise<void> {
    await this.db
      .insert(gatewayInstances)
      .values({ id, aliveUntil: inMs(ttlMs) })
      .onConflictDoUpdate({ target: gatewayInstances.id, set: { aliveUntil: inMs(ttlMs) } });
    // The rows of instances long gone are let go here, since no one else would.
    await this.db.delete(gatewayInstances).where(sql`${gatewayInstances.aliveUntil} < now() - interval '1 day'`);
  }

  async isAlive(id: string): Promise<boolean> {
    const rows = await this.db
      .select({ id: gatewayInstances.id })
      .from(gatewayInstances)
      .where(and(eq(gatewayInstances.id, id), gt(gatewayInstances.aliveUntil, sql`now()`)))
      .limit(1);
    return rows.length > 0;
  }

  async leave(id: string): Promise<void> {
    await this.db.delete(gatewayInstances).where(eq(gatewayInstances.id, id));
  }
}
