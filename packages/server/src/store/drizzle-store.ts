/**
 * The repositories over a Drizzle database: one implementation for PGlite
 * and PostgreSQL (open.ts picks the driver).
 *
 * Rules that keep it correct on both drivers:
 * - counters are updated in SQL (`spent = spent + $1`), never read-modify-
 *   write: PostgreSQL loses concurrent RMW updates (PGlite serialises
 *   everything, so only PostgreSQL tests show it);
 * - no transactions: a statement on the root db inside a transaction hangs
 *   PGlite, and every operation here is a single statement anyway (the one
 *   exception, embedded usage rows through COPY, is a script the database
 *   thread runs as one simple query, so one implicit transaction:
 *   `copyRows`);
 * - each method is one statement (settings.setIfAbsent: at most two; setManyIfAbsent: two per
 *   SETTINGS_CHUNK names).
 */
import type { SQL } from 'drizzle-orm';
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import { forEachInTurns } from '../lib/event-loop-turns.js';
import { DrizzleBudgetLeaseRepo } from './budget-lease-repo.js';
import { orm } from './drizzle-cjs.js';
import { DrizzleIdempotencyRepo } from './idempotency-repo.js';
import { DrizzleInstanceRepo } from './instance-repo.js';
import type * as schema from './schema.js';
import { apiKeys, settings, usageRecords, workspaces } from './schema.js';
import type {
  ApiKeyRecord,
  BudgetLeaseRepo,
  IdempotencyRepo,
  InstanceRepo,
  KeyPatch,
  KeyRepo,
  NewApiKey,
  NewWorkspace,
  PageQuery,
  SettingsRepo,
  Store,
  StoreLog,
  UsageQuery,
  UsageRecord,
  UsageRepo,
  Workspace,
  WorkspacePatch,
  WorkspaceRepo,
} from './types.js';
import { ROWS_PER_TURN, USAGE_COLUMNS, usageCopyScript } from './usage-copy.js';

const { and, count, desc, eq, gte, inArray, lt, notExists, sql } = orm;

export type Schema = typeof schema;
export type Db = PgDatabase<PgQueryResultHKT, Schema>;

/** Default and maximum page size of `usage.list`. */
export const USAGE_LIST_DEFAULT_LIMIT = 1_000;
export const USAGE_LIST_MAX_LIMIT = 10_000;

/**
 * Usage rows as `json_to_recordset` reads them; money as decimal text, so no float reaches `numeric`.
 * Built {@link ROWS_PER_TURN} rows per turn of the event loop, so that a flush does not hold it.
 */
async function usageJson(records: UsageRecord[]): Promise<string> {
  const rows: string[] = [];
  await forEachInTurns(records, ROWS_PER_TURN, (r) => {
    rows.push(
      JSON.stringify({
        request_id: r.requestId,
        key_id: r.keyId,
        workspace_id: r.workspaceId,
        kind: r.kind,
        model: r.model,
        provider: r.provider,
        prompt_tokens: r.promptTokens,
        completion_tokens: r.completionTokens,
        total_tokens: r.totalTokens,
        units: r.units,
        cost: moneyText(r.cost),
        latency_ms: r.latencyMs,
        status: r.status,
        error_code: r.errorCode,
        streamed: r.streamed,
        created_at: r.createdAt.toISOString(),
      }),
    );
  });
  return `[${rows.join(',')}]`;
}

/** Rows per INSERT in `usage.insertMany`: a bigger batch is split into statements of this size. */
export const USAGE_INSERT_CHUNK = 2_000;

/** Money crosses into SQL as decimal text and is added as `numeric`, never as a float. */
function moneyText(amount: number): string {
  if (!Number.isFinite(amount)) throw new RangeError(`amount must be a finite number, got ${amount}`);
  return String(amount);
}

class DrizzleWorkspaceRepo implements WorkspaceRepo {
  constructor(private readonly db: Db) {}

  async create(input: NewWorkspace): Promise<Workspace> {
    const [row] = await this.db
      .insert(workspaces)
      .values({ id: input.id, name: input.name, enabledModels: input.enabledModels, budget: input.budget })
      .returning();
    if (row === undefined) throw new Error('insert into workspaces returned no row');
    return row;
  }

  async get(id: string): Promise<Workspace | null> {
    const [row] = await this.db.select().from(workspaces).where(eq(workspaces.id, id)).limit(1);
    return row ?? null;
  }

  async list(page: PageQuery): Promise<Workspace[]> {
    const before = page.after === undefined ? undefined : createdBefore(workspaces, page.after);
    return this.db.select().from(workspaces).where(before).orderBy(desc(workspaces.createdAt), desc(workspaces.id)).limit(page.limit);
  }

  async update(id: string, patch: WorkspacePatch): Promise<Workspace | null> {
    const set = given(patch);
    if (set === null) return this.get(id);
    const [row] = await this.db
      .update(workspaces)
      .set(patch.budget === undefined ? set : { ...set, budgetSeq: sql`${workspaces.budgetSeq} + 1` })
      .where(eq(workspaces.id, id))
      .returning();
    return row ?? null;
  }

  async deleteUnused(id: string): Promise<boolean> {
    const used = this.db.select({ id: apiKeys.id }).from(apiKeys).where(eq(apiKeys.workspaceId, id));
    const rows = await this.db
      .delete(workspaces)
      .where(and(eq(workspaces.id, id), notExists(used)))
      .returning({ id: workspaces.id });
    return rows.length > 0;
  }
}

/** The fields a patch gives (one left undefined keeps what is stored); null when it gives none. */
function given<T extends object>(patch: T): Partial<T> | null {
  const set = Object.fromEntries(Object.entries(patch).filter(([, value]) => value !== undefined)) as Partial<T>;
  return Object.keys(set).length === 0 ? null : set;
}

/**
 * Rows created before the row `after` of `table` (newest first, ties by id): keyset paging, which neither skips
 * nor repeats a row when rows are added between two pages. An id that names no row matches nothing.
 */
function createdBefore(table: typeof workspaces | typeof apiKeys, after: string): SQL {
  // Inside the subquery the columns name its own row (the nearest FROM), outside it the listed one.
  return sql`(${table.createdAt}, ${table.id}) < (SELECT ${table.createdAt}, ${table.id} FROM ${table} WHERE ${table.id} = ${after})`;
}

class DrizzleKeyRepo implements KeyRepo {
  constructor(private readonly db: Db) {}

  async create(input: NewApiKey): Promise<ApiKeyRecord> {
    const [row] = await this.db
      .insert(apiKeys)
      .values({
        id: input.id,
        name: input.name,
        workspaceId: input.workspaceId,
        hash: input.hash,
        rateLimitRpm: input.rateLimitRpm,
        budget: input.budget,
      })
      .returning();
    if (row === undefined) throw new Error('insert into api_keys returned no row');
    return row;
  }

  async getById(id: string): Promise<ApiKeyRecord | null> {
    const [row] = await this.db.select().from(apiKeys).where(eq(apiKeys.id, id)).limit(1);
    return row ?? null;
  }

  async getByHash(hash: string): Promise<ApiKeyRecord | null> {
    const [row] = await this.db.select().from(apiKeys).where(eq(apiKeys.hash, hash)).limit(1);
    return row ?? null;
  }

  async update(id: string, patch: KeyPatch): Promise<ApiKeyRecord | null> {
    const set = given(patch);
    if (set === null) return this.getById(id);
    // A revoked key is left as it is, even when its revocation lands between an admin's check and this update.
    const [row] = await this.db
      .update(apiKeys)
      .set(patch.budget === undefined ? set : { ...set, budgetSeq: sql`${apiKeys.budgetSeq} + 1` })
      .where(and(eq(apiKeys.id, id), eq(apiKeys.revoked, false)))
      .returning();
    return row ?? null;
  }

  async revoke(id: string): Promise<ApiKeyRecord | null> {
    const [row] = await this.db.update(apiKeys).set({ revoked: true }).where(eq(apiKeys.id, id)).returning();
    return row ?? null;
  }

  async delete(id: string): Promise<boolean> {
    const rows = await this.db.delete(apiKeys).where(eq(apiKeys.id, id)).returning({ id: apiKeys.id });
    return rows.length > 0;
  }

  async count(): Promise<number> {
    const [row] = await this.db.select({ n: count() }).from(apiKeys);
    return row?.n ?? 0;
  }

  async any(): Promise<boolean> {
    const rows = await this.db.select({ id: apiKeys.id }).from(apiKeys).limit(1);
    return rows.length > 0;
  }

  async list(page: PageQuery & { workspaceId?: string }): Promise<ApiKeyRecord[]> {
    const where = and(
      page.workspaceId === undefined ? undefined : eq(apiKeys.workspaceId, page.workspaceId),
      page.after === undefined ? undefined : createdBefore(apiKeys, page.after),
    );
    return this.db.select().from(apiKeys).where(where).orderBy(desc(apiKeys.createdAt), desc(apiKeys.id)).limit(page.limit);
  }
}

/** The rows of a chunk as one JSON parameter (PostgreSQL). */
async function rowsFromJson(chunk: UsageRecord[]): Promise<SQL> {
  return sql`SELECT * FROM json_to_recordset(${await usageJson(chunk)}::json) AS r(request_id text, key_id text, workspace_id text,
    kind text, model text, provider text, prompt_tokens int4, completion_tokens int4, total_tokens int4, units float8,
    cost numeric, latency_ms int4, status int4, error_code text, streamed bool, created_at timestamptz)`;
}

/** The rows of a chunk as one array parameter per column (PGlite). */
function rowsFromArrays(chunk: UsageRecord[]): SQL {
  const col = <T>(pick: (r: UsageRecord) => T) => sql.param(chunk.map(pick));
  return sql`SELECT * FROM unnest(${col((r) => r.requestId)}::text[], ${col((r) => r.keyId)}::text[], ${col((r) => r.workspaceId)}::text[],
    ${col((r) => r.kind)}::text[], ${col((r) => r.model)}::text[], ${col((r) => r.provider)}::text[],
    ${col((r) => r.promptTokens)}::int4[], ${col((r) => r.completionTokens)}::int4[], ${col((r) => r.totalTokens)}::int4[],
    ${col((r) => r.units)}::float8[], ${col((r) => moneyText(r.cost))}::numeric[], ${col((r) => r.latencyMs)}::int4[],
    ${col((r) => r.status)}::int4[], ${col((r) => r.errorCode)}::text[], ${col((r) => r.streamed)}::bool[],
    ${col((r) => r.createdAt.toISOString())}::timestamptz[])`;
}

/**
 * Inserts `rows` (new request ids only) and adds the cost of those inserted
 * to their keys' and workspaces' spend. The rows to update are locked in id
 * order first (workspaces, then keys), so that instances flushing at the
 * same time wait for each other instead of deadlocking. The inserted rows are
 * summed once per key and workspace pair, and the rest works on those few
 * sums: reading every inserted row three more times cost embedded PGlite
 * about 2 µs per row (7% of the statement).
 */
function withSpend(rows: SQL): SQL {
  return sql`
    WITH stored AS (
      INSERT INTO usage_records (${sql.raw(USAGE_COLUMNS)}) ${rows}
      ON CONFLICT (request_id) DO NOTHING
      RETURNING key_id, workspace_id, cost
    ), paid AS (
      SELECT key_id, workspace_id, sum(cost) AS total FROM stored WHERE cost > 0 GROUP BY key_id, workspace_id
    ), ws_locked AS (
      SELECT id FROM workspaces WHERE id IN (SELECT workspace_id FROM paid) ORDER BY id FOR UPDATE
    ), keys_locked AS (
      SELECT id FROM api_keys WHERE id IN (SELECT key_id FROM paid) ORDER BY id FOR UPDATE
    ), by_key AS (
      UPDATE api_keys SET spent = api_keys.spent + s.total
      FROM (SELECT key_id, sum(total) AS total FROM paid WHERE key_id IN (SELECT id FROM keys_locked) GROUP BY key_id) s
      WHERE api_keys.id = s.key_id
    )
    UPDATE workspaces SET spent = workspaces.spent + s.total
    FROM (SELECT workspace_id, sum(total) AS total FROM paid WHERE workspace_id IN (SELECT id FROM ws_locked) GROUP BY workspace_id) s
    WHERE workspaces.id = s.workspace_id`;
}

/** Runs `sql`, one script whose COPY reads `csv`, as one simple query: one transaction (the embedded database thread). */
export type CopyRows = (sql: string, csv: string) => Promise<void>;

const UNIQUE_VIOLATION = '23505';

class DrizzleUsageRepo implements UsageRepo {
  constructor(
    private readonly db: Db,
    private readonly kind: Store['kind'],
    private readonly copyRows?: CopyRows,
  ) {}

  /**
   * One statement per chunk whatever its size, which also adds the cost of
   * the rows it stored to their keys' and workspaces' spend: a retried
   * chunk whose rows are already there stores nothing and adds nothing, and
   * a crash cannot leave rows without their spend. With PostgreSQL the rows
   * travel as one JSON parameter that `json_to_recordset` reads (the
   * gateway only runs JSON.stringify; the server does the parsing).
   * Embedded PGlite takes a chunk through COPY first ({@link copyChunk});
   * this statement only gets a chunk holding a row already stored, each
   * column as one array parameter that `unnest` turns back into rows
   * (PGlite parses JSON slower than arrays). Building a VALUES list of 16
   * parameters per row cost about 8 times as much per row (query building
   * and per-parameter encoding).
   */
  async insertMany(records: UsageRecord[]): Promise<void> {
    for (let i = 0; i < records.length; i += USAGE_INSERT_CHUNK) {
      const chunk = records.slice(i, i + USAGE_INSERT_CHUNK);
      if (this.copyRows && (await this.copyChunk(this.copyRows, chunk))) continue;
      await this.db.execute(withSpend(this.kind === 'postgres' ? await rowsFromJson(chunk) : rowsFromArrays(chunk)));
    }
  }

  /**
   * Embedded: the rows through COPY, and their cost added from sums made
   * here, in one transaction (usage-copy.ts); about a third less of the
   * database thread's time per row than the statement below, and half the
   * fixed cost per chunk (docs/decisions.md). COPY takes all rows or none:
   * false when one was already stored (a retried batch, a repeated request
   * id), and the statement that skips stored rows then takes the chunk.
   */
  private async copyChunk(copyRows: CopyRows, chunk: UsageRecord[]): Promise<boolean> {
    const script = await usageCopyScript(chunk);
    try {
      await copyRows(script.sql, script.csv);
      return true;
    } catch (err) {
      if ((err as { code?: unknown }).code === UNIQUE_VIOLATION) return false;
      throw err;
    }
  }

  /**
   * Newest first (`createdAt` descending). `since` is inclusive, `until`
   * exclusive. `limit` defaults to {@link USAGE_LIST_DEFAULT_LIMIT} and is
   * capped at {@link USAGE_LIST_MAX_LIMIT}.
   */
  async list(query: UsageQuery): Promise<UsageRecord[]> {
    const where: SQL[] = [];
    if (query.keyId !== undefined) where.push(eq(usageRecords.keyId, query.keyId));
    if (query.workspaceId !== undefined) where.push(eq(usageRecords.workspaceId, query.workspaceId));
    if (query.requestId !== undefined) where.push(eq(usageRecords.requestId, query.requestId));
    if (query.since !== undefined) where.push(gte(usageRecords.createdAt, query.since));
    if (query.until !== undefined) where.push(lt(usageRecords.createdAt, query.until));
    const limit = Math.max(1, Math.min(Math.trunc(query.limit ?? USAGE_LIST_DEFAULT_LIMIT), USAGE_LIST_MAX_LIMIT));
    return this.db
      .select()
      .from(usageRecords)
      .where(and(...where))
      .orderBy(desc(usageRecords.createdAt), desc(usageRecords.requestId))
      .limit(limit);
  }
}

/** Settings written or read per statement by setManyIfAbsent: two parameters each, far from PostgreSQL's 65535. */
const SETTINGS_CHUNK = 500;

class DrizzleSettingsRepo implements SettingsRepo {
  constructor(private readonly db: Db) {}

  async get(name: string): Promise<string | null> {
    const [row] = await this.db.select({ value: settings.value }).from(settings).where(eq(settings.name, name)).limit(1);
    return row?.value ?? null;
  }

  async setIfAbsent(name: string, value: string): Promise<string> {
    const [inserted] = await this.db
      .insert(settings)
      .values({ name, value })
      .onConflictDoNothing({ target: settings.name })
      .returning({ value: settings.value });
    if (inserted !== undefined) return inserted.value;
    // Someone set it first; settings are never deleted, so it is there.
    const stored = await this.get(name);
    if (stored === null) throw new Error(`setting ${name} vanished`);
    return stored;
  }

  async setManyIfAbsent(entries: readonly (readonly [string, string])[]): Promise<Map<string, string>> {
    const stored = new Map<string, string>();
    for (let i = 0; i < entries.length; i += SETTINGS_CHUNK) {
      const chunk = entries.slice(i, i + SETTINGS_CHUNK);
      await this.db
        .insert(settings)
        .values(chunk.map(([name, value]) => ({ name, value })))
        .onConflictDoNothing({ target: settings.name });
      // Read back: a name set first by another instance keeps its value.
      const names = chunk.map(([name]) => name);
      for (const row of await this.db.select({ name: settings.name, value: settings.value }).from(settings).where(inArray(settings.name, names))) {
        stored.set(row.name, row.value);
      }
    }
    return stored;
  }

  async set(name: string, value: string): Promise<void> {
    await this.db.insert(settings).values({ name, value }).onConflictDoUpdate({ target: settings.name, set: { value } });
  }
}

/** What a driver supplies besides the Drizzle database. */
export interface DriverHooks {
  kind: Store['kind'];
  created?: Store['created'];
  /** Embedded PGlite: usage rows go through COPY (see DrizzleUsageRepo). */
  copyRows?: CopyRows;
  migrate(): Promise<void>;
  ping(): Promise<void>;
  /** The database's clock (ms since the epoch), where it may not be this host's. */
  clockMs?(): Promise<number>;
  logTo?(log: StoreLog): void;
  close(): Promise<void>;
}

export class DrizzleStore implements Store {
  readonly kind: Store['kind'];
  readonly created: Store['created'];
  readonly workspaces: WorkspaceRepo;
  readonly keys: KeyRepo;
  readonly usage: UsageRepo;
  readonly settings: SettingsRepo;
  readonly idempotency: IdempotencyRepo;
  readonly budgetLeases: BudgetLeaseRepo;
  readonly instances: InstanceRepo;
  readonly clockMs?: () => Promise<number>;
  readonly #hooks: DriverHooks;
  #closed: Promise<void> | undefined;

  constructor(db: Db, hooks: DriverHooks) {
    this.kind = hooks.kind;
    this.created = hooks.created ?? null;
    this.#hooks = hooks;
    this.workspaces = new DrizzleWorkspaceRepo(db);
    this.keys = new DrizzleKeyRepo(db);
    this.usage = new DrizzleUsageRepo(db, hooks.kind, hooks.copyRows);
    this.settings = new DrizzleSettingsRepo(db);
    this.idempotency = new DrizzleIdempotencyRepo(db);
    this.budgetLeases = new DrizzleBudgetLeaseRepo(db);
    this.instances = new DrizzleInstanceRepo(db);
    const clockMs = hooks.clockMs;
    if (clockMs) this.clockMs = () => clockMs();
  }

  migrate(): Promise<void> {
    return this.#hooks.migrate();
  }

  ping(): Promise<void> {
    return this.#hooks.ping();
  }

  logTo(log: StoreLog): void {
    this.#hooks.logTo?.(log);
  }

  /** Idempotent. */
  close(): Promise<void> {
    this.#closed ??= this.#hooks.close();
    return this.#closed;
  }
}
