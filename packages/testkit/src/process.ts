import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, openSync, readdirSync, readFileSync, rmSync } from 'node:fs';

/**
 * Everything the testkit started, so it can be killed and removed when the
 * test process exits without stopping it (a failed test, a forgotten stop()).
 */
const liveProcesses = new Set<ManagedProcess>();
const liveDirs = new Set<string>();
let hooked = false;

function cleanupSync(): void {
  for (const p of liveProcesses) p.killSync();
  liveProcesses.clear();
  for (const dir of liveDirs) {
    try {
      rmSync(dir, { recursive: true, force: true });
    } catch {
      // best effort at exit
    }
  }
  liveDirs.clear();
}

function hookExit(): void {
  if (hooked) return;
  hooked = true;
  process.on('exit', cleanupSync);
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(signal, () => {
      cleanupSync();
      // Keep the default behaviour (die by the signal) unless someone else handles it.
      if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
    });
  }
}

export function trackDir(dir: string): void {
  hookExit();
  liveDirs.add(dir);
}

export function removeDir(dir: string): void {
  liveDirs.delete(dir);
  rmSync(dir, { recursive: true, force: true });
}

export interface SpawnOptions {
  cwd: string;
  /** Appended with the process's stdout and stderr. */
  logFile: string;
  env?: NodeJS.ProcessEnv;
  uid?: number;
  gid?: number;
}

/** Environment without libpq variables that could redirect a server or client. */
export function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!k.startsWith('PG')) env[k] = v;
  }
  return { ...env, LC_ALL: 'C', LANG: 'C', ...extra };
}

/**
 * A server process in its own process group (so pause/resume/kill reach
 * every process it forks, e.g. PostgreSQL's backends), with its output in a
 * log file. It does not keep the test process alive.
 */
export class ManagedProcess {
  readonly pid: number;
  readonly exited: Promise<void>;
  #done = false;
  #spawnError: Error | undefined;
  readonly #child: ChildProcess;
  readonly #logFile: string;

  constructor(command: string, args: string[], opts: SpawnOptions) {
    hookExit();
    this.#logFile = opts.logFile;
    const fd = openSync(opts.logFile, 'a');
    try {
      this.#child = spawn(command, args, {
        cwd: opts.cwd,
        env: opts.env ?? cleanEnv(),
        stdio: ['ignore', fd, fd],
        detached: true,
        ...(opts.uid === undefined ? {} : { uid: opts.uid }),
        ...(opts.gid === undefined ? {} : { gid: opts.gid }),
      });
    } finally {
      closeSync(fd);
    }
    const pid = this.#child.pid;
    this.exited = new Promise<void>((resolve) => {
      this.#child.once('exit', () => resolve());
      this.#child.once('error', (err) => {
        this.#spawnError = err;
        resolve();
      });
    }).then(() => {
      this.#done = true;
      liveProcesses.delete(this);
    });
    if (pid === undefined) {
      // spawn failed synchronously (ENOENT and friends arrive as 'error').
      this.pid = -1;
      this.#done = true;
      return;
    }
    this.pid = pid;
    this.#child.unref();
    liveProcesses.add(this);
  }

  get running(): boolean {
    return !this.#done;
  }

  /** The tail of the process's log, for error messages. */
  logTail(lines = 30): string {
    if (this.#spawnError !== undefined) return `could not start: ${this.#spawnError.message}`;
    try {
      return readFileSync(this.#logFile, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
    } catch {
      return '(no log)';
    }
  }

  /**
   * Sends a signal to the process and every descendant. A process group is
   * not enough: PostgreSQL puts each backend in a session of its own, so
   * SIGSTOP to the group would leave open connections answering. For STOP
   * and KILL the leader is stopped first, so it forks nothing in between.
   */
  signalTree(signal: 'SIGSTOP' | 'SIGCONT' | 'SIGKILL'): void {
    if (this.#done) return;
    if (signal === 'SIGCONT') {
      for (const pid of descendants(this.pid)) signalQuietly(pid, signal);
      this.signal(signal);
    } else {
      // Freeze the leader and wait until it is really stopped, so that it
      // cannot fork after the tree is listed; then sweep until no new pid shows.
      this.signal('SIGSTOP');
      waitForState(this.pid, 'T', 200);
      const done = new Set<number>();
      for (let round = 0; round < 5; round++) {
        const fresh = descendants(this.pid).filter((pid) => !done.has(pid));
        if (fresh.length === 0) break;
        for (const pid of fresh) {
          signalQuietly(pid, signal);
          done.add(pid);
        }
      }
      // Last: once the leader dies its children are re-parented and out of reach.
      if (signal === 'SIGKILL') this.signal(signal);
    }
    this.signalGroup(signal);
  }

  /** Sends a signal to the whole process group. */
  signalGroup(signal: NodeJS.Signals): void {
    if (this.#done) return;
    try {
      process.kill(-this.pid, signal);
    } catch {
      try {
        process.kill(this.pid, signal);
      } catch {
        // already gone
      }
    }
  }

  /** Sends a signal to the leader process only. */
  signal(signal: NodeJS.Signals): void {
    if (this.#done) return;
    try {
      process.kill(this.pid, signal);
    } catch {
      // already gone
    }
  }

  /**
   * Asks the process to stop with `signal` (resuming it first if paused),
   * waits up to `graceMs`, then SIGKILLs the group. Resolves once it exited.
   */
  async stop(signal: NodeJS.Signals, graceMs = 10_000): Promise<void> {
    if (this.#done) return;
    this.signal(signal);
    this.signalTree('SIGCONT');
    let timer: NodeJS.Timeout | undefined;
    const timedOut = await Promise.race([
      this.exited.then(() => false),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(true), graceMs);
      }),
    ]);
    clearTimeout(timer);
    if (timedOut) await this.kill();
    // Children the leader left behind (none normally).
    this.killGroupQuietly();
  }

  /** SIGKILL to the whole group; resolves once the leader exited. */
  async kill(): Promise<void> {
    if (this.#done) return;
    this.signalTree('SIGKILL');
    await this.exited;
  }

  killSync(): void {
    this.signalTree('SIGKILL');
  }

  private killGroupQuietly(): void {
    try {
      process.kill(-this.pid, 'SIGKILL');
    } catch {
      // no such group: good
    }
  }
}

function signalQuietly(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // gone already
  }
}

/** The state letter of a process in /proc ('R', 'S', 'T', 'Z', …), or null when it is gone. */
export function processState(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0] ?? null;
  } catch {
    return null;
  }
}

const sleeper = new Int32Array(new SharedArrayBuffer(4));

/** Waits (synchronously, briefly) until a process is in `state` or gone. */
function waitForState(pid: number, state: string, timeoutMs: number): void {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const current = processState(pid);
    if (current === null || current === state || current === 'Z' || Date.now() > deadline) return;
    Atomics.wait(sleeper, 0, 0, 1);
  }
}

/** Pids of every descendant of `root` (Linux /proc; empty elsewhere). */
export function descendants(root: number): number[] {
  const children = new Map<number, number[]>();
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return [];
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // exited meanwhile
    }
    // "pid (comm) state ppid …": comm may hold spaces and parentheses.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ppid = Number(fields[1]);
    const list = children.get(ppid);
    if (list === undefined) children.set(ppid, [Number(entry)]);
    else list.push(Number(entry));
  }
  const out: number[] = [];
  const queue = [root];
  for (let pid = queue.shift(); pid !== undefined; pid = queue.shift()) {
    for (const child of children.get(pid) ?? []) {
      out.push(child);
      queue.push(child);
    }
  }
  return out;
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Polls `check` until it returns true; fails early when the process exits
 * and after `timeoutMs`, with the process's log in the message.
 */
export async function waitUntilReady(what: string, proc: ManagedProcess, check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (let delay = 10; ; delay = Math.min(delay * 2, 100)) {
    if (!proc.running) {
      await proc.exited;
      throw new Error(`${what} exited during start-up. Its log:\n${proc.logTail()}`);
    }
    if (await check()) return;
    if (Date.now() > deadline) {
      await proc.kill();
      throw new Error(`${what} not ready after ${timeoutMs} ms. Its log:\n${proc.logTail()}`);
    }
    await sleep(delay);
  }
}
