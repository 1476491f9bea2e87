import { orm } from './drizzle-cjs.js';
import type { Db } from './drizzle-store.js';
import { idempotencyKeys, usageRecords } from './schema.js';
import { inMs } from './sql-time.js';
import type { IdempotencyRepo, IdempotencyRow } from './types.js';

const { and, eq, gt, lte, sql } = orm;

const live = () => gt(idempotencyKeys.expiresAt, sql`now()`);

function toRow(r: { scope: string; fingerprint: string; owner: string; state: string; answer: unknown }): IdempotencyRow {
  const state = r.state === 'done' || r.state === 'lost' ? r.state : 'pending';
  return { scope: r.scope, fingerprint: r.fingerprint, owner: r.owner, state, answer: r.answer ?? null };
}

const columns = {
  scope: idempotencyKeys.scope,
  fingerprint: idempotencyKeys.fingerprint,
  owner: idempotencyKeys.owner,
  state: idempotencyKeys.state,
  answer: idempotencyKeys.answer,
};

export class DrizzleIdempotencyRepo implements IdempotencyRepo {
  constructor(private readonly db: Db) {}

  async claim(input: { scope: string; fingerprint: string; owner: string }, ttlMs: number): Promise<IdempotencyRow | null> {
    const fresh = { fingerprint: input.fingerprint, owner: input.owner, state: 'pending', answer: null, expiresAt: inMs(ttlMs) };
    // Insert, or take over a row whose time ran out; a live row is left alone (no row returned).
    const [claimed] = await this.db
      .insert(idempotencyKeys)
      .values({ scope: input.scope, ...fresh })
      .onConflictDoUpdate({ target: idempotencyKeys.scope, set: fresh, setWhere: lte(idempotencyKeys.expiresAt, sql`now()`) })
      .returning(columns);
    if (claimed) return toRow(claimed);
    return this.get(input.scope);
  }

  async get(scope: string): Promise<IdempotencyRow | null> {
    const [row] = await this.db
      .select(columns)
      .from(idempotencyKeys)
      .where(and(eq(idempotencyKeys.scope, scope), live()))
      .limit(1);
    return row ? toRow(row) : null;
  }

  async refresh(scope: string, owner: string, ttlMs: number): Promise<boolean> {
    const rows = await this.db
      .update(idempotencyKeys)
      .set({ expiresAt: inMs(ttlMs) })
      .where(and(eq(idempotencyKeys.scope, scope), eq(idempotencyKeys.owner, owner), eq(idempotencyKeys.state, 'pending')))
      .returning({ scope: idempotencyKeys.scope });
    return rows.length > 0;
  }

  async complete(scope: string, owner: string, answer: unknown, ttlMs: number): Promise<boolean> {
    const rows = await this.db
      .update(idempotencyKeys)
      .set({ state: 'done', answer, expiresAt: inMs(ttlMs) })
      .where(and(eq(idempotencyKeys.scope, scope), eq(idempotencyKeys.owner, owner)))
      .returning({ scope: idempotencyKeys.scope });
    return rows.length > 0;
  }

  async takeOverDead(scope: string, seen: string, requestId: string, owner: string, ttlMs: number, lostTtlMs: number): Promise<'taken' | 'billed' | 'changed'> {
    // One statement: the usage record is looked up as the claim is replaced, so of two repeats one decides.
    const billed = sql`EXISTS (SELECT 1 FROM ${usageRecords} WHERE ${usageRecords.requestId} = ${requestId})`;
    const [row] = await this.db
      .update(idempotencyKeys)
      .set({
        owner,
        state: sql`CASE WHEN ${billed} THEN 'lost' ELSE 'pending' END`,
        expiresAt: sql`CASE WHEN ${billed} THEN ${inMs(lostTtlMs)} ELSE ${inMs(ttlMs)} END`,
      })
      .where(and(eq(idempotencyKeys.scope, scope), eq(idempotencyKeys.owner, seen), eq(idempotencyKeys.state, 'pending'), live()))
      .returning({ state: idempotencyKeys.state });
    if (!row) return 'changed';
    return row.state === 'lost' ? 'billed' : 'taken';
  }

  async release(scope: string, owner: string): Promise<void> {
    await this.db.delete(idempotencyKeys).where(and(eq(idempotencyKeys.scope, scope), eq(idempotencyKeys.owner, owner), eq(idempotencyKeys.state, 'pending')));
  }

  async drop(scope: string, owner: string): Promise<void> {
    await this.db.delete(idempotencyKeys).where(and(eq(idempotencyKeys.scope, scope), eq(idempotencyKeys.owner, owner)));
  }

  async forgetStream(scope: string, streamId: string): Promise<void> {
    await this.db
      .delete(idempotencyKeys)
      .where(
        and(
          eq(idempotencyKeys.scope, scope),
          eq(idempotencyKeys.state, 'done'),
          sql`${idempotencyKeys.answer}->'stream'->>'id' = ${streamId}`,
          sql`${idempotencyKeys.answer}->'stream'->'events' IS NULL`,
        ),
      );
  }

  async dropPending(): Promise<number> {
    const rows = await this.db.delete(idempotencyKeys).where(eq(idempotencyKeys.state, 'pending')).returning({ scope: idempotencyKeys.scope });
    return rows.length;
  }

  async sweep(): Promise<number> {
    const rows = await this.db.delete(idempotencyKeys).where(lte(idempotencyKeys.expiresAt, sql`now()`)).returning({ scope: idempotencyKeys.scope });
    return rows.length;
  }
}
