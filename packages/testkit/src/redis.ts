import { mkdtempSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findRedisServer } from './binaries.js';
import { freePort } from './ports.js';
import { ManagedProcess, removeDir, trackDir, waitUntilReady } from './process.js';

export interface RedisServer {
  /** `redis://127.0.0.1:PORT` */
  url: string;
  port: number;
  /** pid of the current redis-server process (changes on restart). */
  readonly pid: number;
  /** SIGTERM, wait for exit, remove the temp dir. Idempotent. */
  stop(): Promise<void>;
  /** SIGKILL (a crash); the server stays down until restart(). */
  kill(): Promise<void>;
  /** SIGSTOP: connections stay open but nothing answers. */
  pause(): void;
  /** SIGCONT */
  resume(): void;
  /** Stops (or finishes off) the process and starts a fresh one on the same port; data is forgotten, unless a SAVE left a snapshot, which it loads. */
  restart(): Promise<void>;
}

const READY_TIMEOUT_MS = 15_000;

/**
 * Sends `PING` over a raw socket; resolves true on `+PONG` (false on
 * anything else: refused, `-LOADING`, no answer within `timeoutMs`).
 */
export function pingRedis(port: number, host = '127.0.0.1', timeoutMs = 1_000): Promise<boolean> {
  return new Promise((resolve) => {
    let buffer = '';
    let settled = false;
    const socket = connect({ port, host });
    const finish = (ok: boolean) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => finish(false), timeoutMs);
    socket.setNoDelay(true);
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.on('data', (chunk) => {
      buffer += chunk.toString('latin1');
      if (buffer.includes('\r\n')) finish(buffer.startsWith('+PONG'));
    });
    socket.once('error', () => finish(false));
    socket.once('close', () => finish(false));
  });
}

/** Starts a throwaway redis-server on a free loopback port, without persistence. */
export async function startRedis(): Promise<RedisServer> {
  const bin = findRedisServer();
  if (bin === null) throw new Error('redis-server is not installed (apt-get install -y redis-server)');
  const dir = mkdtempSync(join(tmpdir(), 'gw-redis-'));
  trackDir(dir);

  const launch = async (port: number): Promise<ManagedProcess> => {
    const proc = new ManagedProcess(
      bin,
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, '--daemonize', 'no', '--logfile', ''],
      { cwd: dir, logFile: join(dir, 'redis.log') },
    );
    await waitUntilReady(`redis-server on port ${port}`, proc, () => pingRedis(port, '127.0.0.1', 500), READY_TIMEOUT_MS);
    return proc;
  };

  // Another process may grab the free port before redis binds it: retry on a new one.
  let port = 0;
  let proc: ManagedProcess | undefined;
  for (let attempt = 1; proc === undefined; attempt++) {
    port = await freePort();
    try {
      proc = await launch(port);
    } catch (err) {
      if (attempt >= 3) {
        removeDir(dir);
        throw err;
      }
    }
  }

  let current: ManagedProcess = proc;
  let stopped = false;
  const server: RedisServer = {
    url: `redis://127.0.0.1:${port}`,
    port,
    get pid() {
      return current.pid;
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      await current.stop('SIGTERM');
      removeDir(dir);
    },
    async kill() {
      await current.kill();
    },
    pause() {
      current.signalTree('SIGSTOP');
    },
    resume() {
      current.signalTree('SIGCONT');
    },
    async restart() {
      if (stopped) throw new Error('restart() after stop()');
      await current.stop('SIGTERM');
      current = await launch(port);
    },
  };
  return server;
}
