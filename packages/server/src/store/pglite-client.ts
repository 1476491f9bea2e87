import { Worker } from 'node:worker_threads';
import { loadPgProxyMigrator, pgProxy } from './drizzle-cjs.js';
import type { StoreLog } from './types.js';

/** An error the database thread reported, with PostgreSQL's fields when it has them. */
export class PgliteThreadError extends Error {
  readonly code: string | undefined;
  readonly detail: string | undefined;
  constructor(fields: { message?: unknown; code?: unknown; detail?: unknown }) {
    super(typeof fields.message === 'string' ? fields.message : 'embedded database error');
    this.name = 'PgliteThreadError';
    this.code = typeof fields.code === 'string' ? fields.code : undefined;
    this.detail = typeof fields.detail === 'string' ? fields.detail : undefined;
  }
}

type Reply = { id: number; ok: true; rows: unknown[] } | { id: number; ok: false; error: Record<string, unknown> };
/** How the thread found its cluster: made from the build's template, made by PGlite's own initdb, or already there. */
export type ClusterOrigin = 'template' | 'initdb' | 'existing';
type Ready = { op: 'ready'; origin: ClusterOrigin } | { op: 'failed'; error: Record<string, unknown> };

// Under vitest this module is the .ts source and Node strips the thread's types itself.
const THREAD_FILE = new URL(`./pglite-thread${import.meta.url.endsWith('.ts') ? '.ts' : '.js'}`, import.meta.url);

const RESTART_DELAYS_MS = [200, 1_000, 5_000];

/**
 * The main thread's handle on the embedded database thread: SQL and
 * parameters go over, rows come back (structured clone). PGlite runs one
 * statement at a time, in the order they were sent.
 *
 * If the thread dies (a crash inside PGlite), the calls in flight fail and
 * a new thread opens the same files (PostgreSQL recovers from its WAL);
 * meanwhile calls fail at once, as they would with PostgreSQL down, and the
 * gateway's own handling of an unreachable database applies (cached keys,
 * usage kept for later).
 */
export class PgliteThread {
  private readonly pending = new Map<number, { resolve: (rows: unknown[]) => void; reject: (err: Error) => void }>();
  private nextId = 1;
  private worker: Worker | null;
  private closed = false;
  private restarts = 0;
  private log: StoreLog | null = null;
  /** What the thread died of, if it said ('error' comes before 'exit'). */
  private crash: string | null = null;

  private constructor(
    worker: Worker,
    /** How the first thread found the cluster (a restarted thread always finds it there). */
    readonly origin: ClusterOrigin,
    private readonly dir: string,
    private readonly migrationsFolder: string,
  ) {
    this.worker = worker;
    this.attach(worker);
  }

  static async open(dir: string, migrationsFolder: string): Promise<PgliteThread> {
    const { worker, origin } = await startThread(dir);
    return new PgliteThread(worker, origin, dir, migrationsFolder);
  }

  /** Rows as arrays of column values (drizzle's 'all') or as objects ('execute'). */
  query(sql: string, params: unknown[], rows: 'array' | 'object'): Promise<unknown[]> {
    return this.call({ op: 'query', sql, params, rows });
  }

  /** Runs `sql` (a script of statements, without parameters) as one simple query, its `COPY ... FROM '/dev/blob'` reading `csv`. */
  async copy(sql: string, csv: string): Promise<void> {
    await this.call({ op: 'copy', sql, csv });
  }

  /** Drizzle's callback for a remote database (`pg-proxy`): its 'all' reads rows as arrays, the rest as objects. */
  readonly remote = async (sql: string, params: unknown[], method: 'all' | 'execute') => ({
    rows: await this.query(sql, params, method === 'all' ? 'array' : 'object'),
  });

  /**
   * Drizzle's migrator for a remote database: it reads the journal through `query` and hands over the statements
   * still to run, which the thread runs in one transaction (and then collects its start's garbage).
   */
  async migrate(): Promise<void> {
    await loadPgProxyMigrator().migrate(pgProxy.drizzle(this.remote), (statements) => this.call({ op: 'migrate', statements }).then(() => {}), {
      migrationsFolder: this.migrationsFolder,
    });
  }

  async ping(): Promise<void> {
    await this.call({ op: 'ping' });
  }

  /** Where its death and restart are told: an operator otherwise sees only the store answering nothing meanwhile. */
  logTo(log: StoreLog): void {
    this.log = log;
  }

  /** How many times the thread was started again after dying. */
  get restartCount(): number {
    return this.restarts;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    const worker = this.worker;
    try {
      if (worker) await this.call({ op: 'close' });
    } finally {
      this.closed = true;
      this.worker = null;
      await worker?.terminate();
    }
  }

  private attach(worker: Worker): void {
    worker.on('message', (msg: Reply) => {
      const call = this.pending.get(msg.id);
      if (!call) return;
      this.pending.delete(msg.id);
      if (this.pending.size === 0) worker.unref();
      if (msg.ok) call.resolve(msg.rows);
      else call.reject(new PgliteThreadError(msg.error));
    });
    worker.on('error', (err) => {
      // 'exit' follows and handles it.
      this.crash = err instanceof Error ? err.message : String(err);
    });
    worker.on('exit', (code) => {
      if (this.worker !== worker) return;
      this.worker = null;
      this.failPending(new Error(`the embedded database thread stopped (exit code ${code})`));
      if (this.closed) return;
      this.log?.error(
        { exitCode: code, error: this.crash },
        'the embedded database thread stopped; starting it again (until then the store is unreachable: cached keys serve, usage records wait)',
      );
      this.crash = null;
      void this.restart();
    });
    // The thread keeps the process alive only while a call waits for it.
    worker.unref();
  }

  private async restart(): Promise<void> {
    for (let attempt = 0; !this.closed; attempt++) {
      await new Promise((r) => setTimeout(r, RESTART_DELAYS_MS[Math.min(attempt, RESTART_DELAYS_MS.length - 1)]).unref());
      if (this.closed) return;
      try {
        const { worker } = await startThread(this.dir);
        if (this.closed) {
          await worker.terminate();
          return;
        }
        this.restarts++;
        this.worker = worker;
        this.attach(worker);
        this.log?.info({ restarts: this.restarts }, 'the embedded database thread started again');
        return;
      } catch (err) {
        // Try again after a longer pause.
        this.log?.warn({ error: err instanceof Error ? err.message : String(err), attempt: attempt + 1 }, 'the embedded database thread could not start again');
      }
    }
  }

  private call(message: Record<string, unknown>): Promise<unknown[]> {
    const worker = this.worker;
    if (!worker) {
      return Promise.reject(new Error(this.closed ? 'the embedded database is closed' : 'the embedded database thread is restarting'));
    }
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      if (this.pending.size === 0) worker.ref();
      this.pending.set(id, { resolve, reject });
      worker.postMessage({ ...message, id });
    });
  }

  private failPending(err: Error): void {
    for (const call of this.pending.values()) call.reject(err);
    this.pending.clear();
  }

  /** Fault injection for tests: ends the thread the way a crash would. */
  async crashForTest(): Promise<void> {
    await this.worker?.terminate();
  }
}

async function startThread(dir: string): Promise<{ worker: Worker; origin: ClusterOrigin }> {
  const worker = new Worker(THREAD_FILE, { workerData: { dir } });
  let settle: { resolve: (r: Ready) => void; reject: (e: Error) => void } | undefined;
  const onMessage = (r: Ready) => settle?.resolve(r);
  const onError = (e: Error) => settle?.reject(e);
  const onExit = (code: number) => settle?.reject(new Error(`the embedded database thread stopped while opening (exit code ${code})`));
  // Only our own listeners come off afterwards: Worker keeps internal ones of its own.
  const ready = await new Promise<Ready>((resolve, reject) => {
    settle = { resolve, reject };
    worker.once('message', onMessage).once('error', onError).once('exit', onExit);
  }).finally(() => worker.off('message', onMessage).off('error', onError).off('exit', onExit));
  if (ready.op === 'failed') {
    await worker.terminate();
    throw new PgliteThreadError(ready.error);
  }
  return { worker, origin: ready.origin };
}
