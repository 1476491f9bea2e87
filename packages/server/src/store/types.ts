/**
 * Repository interfaces of the gateway's durable store. One implementation
 * over Drizzle serves both embedded PGlite and PostgreSQL.
 */

export interface Workspace {
  id: string;
  name: string;
  /** null: every model is enabled. */
  enabledModels: string[] | null;
  /** EUR; null: no budget. */
  budget: number | null;
  /** How many times `budget` was changed (set, removed, set again). */
  budgetSeq: number;
  spent: number;
  createdAt: Date;
}

export interface ApiKeyRecord {
  id: string;
  name: string | null;
  workspaceId: string | null;
  /** sha256 hex of the whole `gw_live_…` key; the key itself is never stored. */
  hash: string;
  rateLimitRpm: number;
  /** EUR; null: no budget. */
  budget: number | null;
  /** How many times `budget` was changed (set, removed, set again). */
  budgetSeq: number;
  spent: number;
  revoked: boolean;
  createdAt: Date;
}

export interface UsageRecord {
  requestId: string;
  keyId: string;
  workspaceId: string | null;
  /** chat | embedding | rerank | audio */
  kind: string;
  model: string;
  /** The provider that answered; for a failure, the last one tried; null when none was called (e.g. a 402 before routing). */
  provider: string | null;
  promptTokens: number;
  completionTokens: number;
  totalTokens: number;
  /** Non-token billing units (rerank search units, audio seconds); 0 otherwise. */
  units: number;
  /** EUR. */
  cost: number;
  latencyMs: number;
  /** HTTP status answered to the client. */
  status: number;
  /** Canonical error code, null on success. */
  errorCode: string | null;
  streamed: boolean;
  createdAt: Date;
}

export interface UsageQuery {
  keyId?: string;
  workspaceId?: string;
  requestId?: string;
  since?: Date;
  until?: Date;
  limit?: number;
}

export interface NewWorkspace {
  id: string;
  name: string;
  enabledModels: string[] | null;
  budget: number | null;
}

export interface NewApiKey {
  id: string;
  name: string | null;
  workspaceId: string | null;
  hash: string;
  rateLimitRpm: number;
  budget: number | null;
}

export interface KeyPatch {
  rateLimitRpm?: number;
  budget?: number | null;
}

/**
 * One page of a list, newest first: at most `limit` rows created before the
 * row whose id is `after` (the last one of the page before), ties by id.
 */
export interface PageQuery {
  limit: number;
  after?: string;
}

export interface WorkspaceRepo {
  create(input: NewWorkspace): Promise<Workspace>;
  get(id: string): Promise<Workspace | null>;
  list(page: PageQuery): Promise<Workspace[]>;
  update(id: string, patch: WorkspacePatch): Promise<Workspace | null>;
  /** Deletes the workspace unless a key refers to it; false when nothing was deleted. */
  deleteUnused(id: string): Promise<boolean>;
}

export interface WorkspacePatch {
  name?: string;
  enabledModels?: string[] | null;
  budget?: number | null;
}

export interface KeyRepo {
  create(input: NewApiKey): Promise<ApiKeyRecord>;
  getById(id: string): Promise<ApiKeyRecord | null>;
  getByHash(hash: string): Promise<ApiKeyRecord | null>;
  /** null when no key has the id or the key is revoked (a revoked key is never changed). */
  update(id: string, patch: KeyPatch): Promise<ApiKeyRecord | null>;
  revoke(id: string): Promise<ApiKeyRecord | null>;
  /** Deletes the key (one never handed out: its create answered an error); false when no key has the id. */
  delete(id: string): Promise<boolean>;
  count(): Promise<number>;
  /** Whether the store holds any key: one row read, where counting them read every key. */
  any(): Promise<boolean>;
  /** A page of keys, of one workspace's when `workspaceId` is given. */
  list(page: PageQuery & { workspaceId?: string }): Promise<ApiKeyRecord[]>;
}

export interface UsageRepo {
  /**
   * Inserts many records and adds the cost of those inserted to their keys' and workspaces'
   * spend, atomically; idempotent per requestId (a repeat is ignored and adds nothing).
   */
  insertMany(records: UsageRecord[]): Promise<void>;
  list(query: UsageQuery): Promise<UsageRecord[]>;
}

export interface SettingsRepo {
  get(name: string): Promise<string | null>;
  /** Stores `value` unless the name is already set; returns the value that is stored. */
  setIfAbsent(name: string, value: string): Promise<string>;
  /** setIfAbsent of many at once, in a few statements (a catalogue's thousands of models): the values stored, by name. */
  setManyIfAbsent(entries: readonly (readonly [string, string])[]): Promise<Map<string, string>>;
  /** Stores `value` under the name, replacing any value there. */
  set(name: string, value: string): Promise<void>;
}

/** A live idempotency entry (store/schema.ts idempotencyKeys). */
export interface IdempotencyRow {
  scope: string;
  fingerprint: string;
  owner: string;
  /** lost: the claim of a request billed whose instance died before it stored the answer (never run again). */
  state: 'pending' | 'done' | 'lost';
  /** The stored answer (JSON), null while pending. */
  answer: unknown;
}

/**
 * Budget leases in the database, for when the shared ledger in Redis is
 * away (limits/lease-ledger.ts): one per instance and scope (`key:<id>`,
 * `ws:<id>`), in 1e-9 EUR.
 */
export interface BudgetLeaseRepo {
  /**
   * Adds between `minNano` and `maxNano` to the lease, as much as the
   * scope's room allows (its stored budget less its stored spend and every
   * live lease); returns what was added. When not even `minNano` is left:
   * -1 if the room could still come (other live leases hold it, or this
   * one holds up to `slackNano` of costs that may be in the stored spend
   * already), else 0. The lease then lives `ttlMs`. Atomic across instances.
   */
  grow(scopeId: string, leaseId: string, minNano: number, maxNano: number, ttlMs: number, slackNano?: number): Promise<number>;
  /**
   * Takes `nano` off the lease (costs now in `spent`, or room handed back)
   * and renews it for `ttlMs`; false when it had already run out.
   */
  shrink(scopeId: string, leaseId: string, nano: number, ttlMs: number): Promise<boolean>;
  /**
   * Adds `nano` to the lease whatever room the scope has left (holds of
   * requests already running, which cannot be refused: room beyond the
   * budget leaves none for any grow until it is given back), and renews
   * it for `ttlMs`. A lease that had run out starts again from `nano`.
   */
  add(scopeId: string, leaseId: string, nano: number, ttlMs: number): Promise<void>;
  /** The room every live lease of the scope holds, and how long the longest of them lives (ms). */
  live(scopeId: string): Promise<{ nano: number; ms: number }>;
  /**
   * Deletes up to `limit` leases that have run out, skipping any another
   * call holds (a grow, or another instance's sweep); returns how many
   * went. A lease that has run out counts for nothing anywhere, so this
   * only keeps the table small.
   */
  sweepExpired(limit: number): Promise<number>;
}

export interface IdempotencyRepo {
  /**
   * Claims `scope` for `owner` (a pending row living `ttlMs`) unless a live
   * row exists; an expired row is taken over. One statement, so concurrent
   * claims have exactly one winner. Returns the live row: `owner`'s own
   * when claimed; null only if a row expired between the two reads.
   */
  claim(input: { scope: string; fingerprint: string; owner: string }, ttlMs: number): Promise<IdempotencyRow | null>;
  /** The live row, if any. */
  get(scope: string): Promise<IdempotencyRow | null>;
  /** Extends `owner`'s pending claim; false when it is no longer theirs. */
  refresh(scope: string, owner: string, ttlMs: number): Promise<boolean>;
  /** Stores `owner`'s answer for `ttlMs`; false when the claim is no longer theirs. */
  complete(scope: string, owner: string, answer: unknown, ttlMs: number): Promise<boolean>;
  /**
   * Takes over the pending claim `seen` (its instance died) for `owner`, unless the claim changed meanwhile ('changed')
   * or a usage record of its request `requestId` exists: then it is marked lost for `lostTtlMs` ('billed').
   */
  takeOverDead(scope: string, seen: string, requestId: string, owner: string, ttlMs: number, lostTtlMs: number): Promise<'taken' | 'billed' | 'changed'>;
  /** Drops `owner`'s pending claim. */
  release(scope: string, owner: string): Promise<void>;
  /** Drops `owner`'s row, pending or done (IdempotencyBackend.drop). */
  drop(scope: string, owner: string): Promise<void>;
  /** Drops a stored answer that is the stream `streamId` without its events (IdempotencyBackend.forgetStream). */
  forgetStream(scope: string, streamId: string): Promise<void>;
  /** Deletes expired rows; returns how many. */
  sweep(): Promise<number>;
  /** Deletes every pending claim (of requests no process runs any more); returns how many. */
  dropPending(): Promise<number>;
}

/** Instances sharing PostgreSQL without Redis, saying they are alive (store/schema.ts gatewayInstances). */
export interface InstanceRepo {
  /** `id` is alive for `ttlMs` more (the database's clock). */
  sayAlive(id: string, ttlMs: number): Promise<void>;
  isAlive(id: string): Promise<boolean>;
  leave(id: string): Promise<void>;
}

export interface Store {
  readonly kind: 'pglite' | 'postgres';
  /** The embedded database created by this start: from the build's template, or by PGlite's own initdb; else null. */
  readonly created: 'template' | 'initdb' | null;
  readonly workspaces: WorkspaceRepo;
  readonly keys: KeyRepo;
  readonly usage: UsageRepo;
  readonly settings: SettingsRepo;
  readonly idempotency: IdempotencyRepo;
  readonly budgetLeases: BudgetLeaseRepo;
  readonly instances: InstanceRepo;
  /** Applies pending migrations. */
  migrate(): Promise<void>;
  /** Resolves when the database answers a trivial query. */
  ping(): Promise<void>;
  /** The database's clock, in ms since the epoch; absent where it is this host's (the embedded database). */
  clockMs?(): Promise<number>;
  /** Where the store says what happens to it beyond a query's error (the embedded database thread dying and coming back). */
  logTo?(log: StoreLog): void;
  close(): Promise<void>;
}

/** The part of the gateway's logger the store writes to. */
export interface StoreLog {
  error(fields: object, message: string): void;
  warn(fields: object, message: string): void;
  info(fields: object, message: string): void;
}
