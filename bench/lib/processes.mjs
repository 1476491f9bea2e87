import { execFileSync, spawn } from 'node:child_process';
import { appendFileSync, closeSync, openSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';

/** Every child this run started, so that all of them are killed at the end, even on failure. */
const children = new Set();

/**
 * Starts `command` pinned to one core with taskset. Its stdout and stderr go
 * straight to `logFile` (a file, not a pipe to this process: a busy bench
 * must never slow the child's logging down).
 */
export function spawnPinned({ core, command, args, env = process.env, logFile }) {
  const fd = openSync(logFile, 'a');
  const child = spawn('taskset', ['-c', String(core), command, ...args], { env, stdio: ['pipe', fd, fd] });
  closeSync(fd);
  children.add(child);
  child.once('exit', (code, signal) => {
    children.delete(child);
    // How it ended, after whatever it wrote itself: a process killed by a signal writes nothing.
    try {
      appendFileSync(logFile, `[bench] process ${child.pid} exited: ${signal ? `signal ${signal}` : `code ${code}`}\n`);
    } catch {
      // The run's directory is already gone: nothing left to tell.
    }
  });
  child.logFile = logFile;
  return child;
}

/** Resolves with the first match of `pattern` in the child's log; rejects if the child exits first or after `timeoutMs`. */
export async function waitForLine(child, pattern, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const match = pattern.exec(readFileSync(child.logFile, 'utf8'));
    if (match) return match;
    if (child.exitCode !== null || child.signalCode !== null)
      throw new Error(`${what} exited (${child.exitCode ?? child.signalCode}) before it was ready; see ${child.logFile}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error(`${what} did not start within ${timeoutMs} ms; see ${child.logFile}`);
}

/** Sends `signal`, waits for the exit, and kills the child if it is still there after `timeoutMs`. */
export async function stopChild(child, { signal = 'SIGTERM', timeoutMs = 15_000 } = {}) {
  if (child.exitCode !== null || child.signalCode !== null) return { code: child.exitCode, signal: child.signalCode };
  const exited = new Promise((resolve) => child.once('exit', (code, sig) => resolve({ code, signal: sig })));
  child.kill(signal);
  // A held (stopped) child acts on the signal only once it goes on.
  child.kill('SIGCONT');
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  const result = await exited;
  clearTimeout(timer);
  return result;
}

/** Temp dirs removed if the run is interrupted (a finished run removes its own, or keeps it for its logs). */
const interruptedDirs = new Set();

export function removeIfInterrupted(dir) {
  interruptedDirs.add(dir);
}

function killAll() {
  for (const child of children) child.kill('SIGKILL');
}

/** Kills every child on exit, on Ctrl-C and on a crash. */
export function killChildrenOnExit() {
  process.on('exit', killAll);
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
    process.once(signal, () => {
      killAll();
      for (const dir of interruptedDirs) rmSync(dir, { recursive: true, force: true });
      process.exit(130);
    });
  }
}

/** Pins this process (every thread) to one core. */
export function pinSelf(core) {
  execFileSync('taskset', ['-a', '-p', '-c', String(core), String(process.pid)], { stdio: 'ignore' });
}

/** The pids of every live process and its parent, from /proc. */
function processTable() {
  const table = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      table.push({ pid: Number(entry), ppid: Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) });
    } catch {
      // Gone meanwhile.
    }
  }
  return table;
}

/** `root` and all its descendants. */
export function processTree(root) {
  const table = processTable();
  const tree = [root];
  for (let i = 0; i < tree.length; i++) for (const p of table) if (p.ppid === tree[i]) tree.push(p.pid);
  return tree;
}

/** Pins a process and every process it has forked (e.g. PostgreSQL's background workers) to one core. */
export function pinProcessTree(root, core) {
  for (const pid of processTree(root)) {
    try {
      execFileSync('taskset', ['-a', '-p', '-c', String(core), String(pid)], { stdio: 'ignore' });
    } catch {
      // Gone meanwhile.
    }
  }
}

/**
 * CPU seconds (user + system) a process has used, by kind of thread: its
 * main thread (the event loop), V8's platform workers (parallel and
 * concurrent GC, background compilers), worker threads (the gateway's is
 * the embedded database) and the rest (libuv's pool and others).
 */
export function threadCpuSeconds(pid) {
  const out = { main: 0, v8: 0, worker: 0, other: 0 };
  let tids = [];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return out;
  }
  const ticks = 100; // USER_HZ on Linux
  for (const tid of tids) {
    let raw;
    try {
      raw = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
    } catch {
      continue; // The thread ended meanwhile.
    }
    const name = raw.slice(raw.indexOf('(') + 1, raw.lastIndexOf(')'));
    const fields = raw.slice(raw.lastIndexOf(')') + 2).split(' ');
    const seconds = (Number(fields[11]) + Number(fields[12])) / ticks;
    const kind = tid === String(pid) ? 'main' : name.startsWith('V8Worker') ? 'v8' : name.startsWith('WorkerThread') ? 'worker' : 'other';
    out[kind] += seconds;
  }
  return out;
}

/** Resident set size of a process, in bytes. */
export function rssBytes(pid) {
  const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return match ? Number(match[1]) * 1024 : 0;
}

/** The highest resident memory the process has had since it started (VmHWM). */
export function peakRssBytes(pid) {
  const match = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return match ? Number(match[1]) * 1024 : 0;
}

/** A port that is free on 127.0.0.1 right now. */
export function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}
