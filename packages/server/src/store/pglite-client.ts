import { Worker } from 'node:worker_threads';

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
type Ready = { op: 'ready' } | { op: 'failed'; error: Record<string, unknown> };

// Under vitest this module is the .ts source and Node strips the thread's types itself.
const THREAD_FILE = new URL(`./pglite-thread${import.meta.url.endsWith('.ts') ? '.ts' : '.js'}`, import.meta.url);

/**
 * The main thread's handle on the embedded database thread: SQL and
 * parameters go over, rows come back (structured clone). PGlite runs one
 * statement at a time, in the order they were sent.
 */
export class PgliteThread {
  private readonly pending = new Map<number, { resolve: (rows: unknown[]) => void; reject: (err: Error) => void }>();
  private nextId = 1;
  private dead: Error | null = null;

  private constructor(private readonly worker: Worker) {
    worker.on('message', (msg: Reply) => {
      const call = this.pending.get(msg.id);
      if (!call) return;
      this.pending.delete(msg.id);
      if (this.pending.size === 0) worker.unref();
      if (msg.ok) call.resolve(msg.rows);
      else call.reject(new PgliteThreadError(msg.error));
    });
    worker.on('error', (err) => this.fail(err));
    worker.on('exit', (code) => this.fail(new Error(`the embedded database thread stopped (exit code ${code})`)));
  }

  static async open(dir: string, migrationsFolder: string): Promise<PgliteThread> {
    const worker = new Worker(THREAD_FILE, { workerData: { dir, migrationsFolder } });
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
    // The thread keeps the process alive only while a call waits for it.
    worker.unref();
    return new PgliteThread(worker);
  }

  /** Rows as arrays of column values (drizzle's 'all') or as objects ('execute'). */
  query(sql: string, params: unknown[], rows: 'array' | 'object'): Promise<unknown[]> {
    return this.call({ op: 'query', sql, params, rows });
  }

  async migrate(): Promise<void> {
    await this.call({ op: 'migrate' });
  }

  async ping(): Promise<void> {
    await this.call({ op: 'ping' });
  }

  async close(): Promise<void> {
    if (this.dead) return;
    try {
      await this.call({ op: 'close' });
    } finally {
      this.dead = new Error('the embedded database is closed');
      await this.worker.terminate();
    }
  }

  private call(message: Record<string, unknown>): Promise<unknown[]> {
    if (this.dead) return Promise.reject(this.dead);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      if (this.pending.size === 0) this.worker.ref();
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ ...message, id });
    });
  }

  private fail(err: Error): void {
    this.dead ??= err;
    for (const call of this.pending.values()) call.reject(err);
    this.pending.clear();
  }
}
