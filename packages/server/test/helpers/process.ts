import { type ChildProcess, spawn } from 'node:child_process';

export const MAIN = new URL('../../dist/main.js', import.meta.url).pathname;

export interface GatewayProcess {
  child: ChildProcess;
  url: string;
  output: () => string;
  exited: Promise<number | null>;
}

/**
 * Runs the built gateway as its own process and waits until it says where it listens; with `fdLimit`, under that
 * limit of open files (`ulimit -n`, set by a shell that then becomes the gateway).
 */
export async function spawnGateway(env: Record<string, string>, timeoutMs = 20_000, fdLimit?: number): Promise<GatewayProcess> {
  const [command, args] =
    fdLimit === undefined ? [process.execPath, [MAIN]] : ['/bin/sh', ['-c', `ulimit -n ${fdLimit} && exec "$0" "$1"`, process.execPath, MAIN]];
  const child = spawn(command, args, {
    env: { PATH: process.env.PATH ?? '', PORT: '0', GW_LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout?.on('data', (d: Buffer) => {
    out += d.toString();
  });
  child.stderr?.on('data', (d: Buffer) => {
    out += d.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const url = await new Promise<string>((resolve, reject) => {
    // Killed, not left running: an orphan would load the machine under the tests that follow.
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`gateway did not start:\n${out}`));
    }, timeoutMs);
    const check = () => {
      const m = /listening on (http:\/\/[\d.]+:\d+)/.exec(out);
      if (m?.[1]) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    };
    child.stdout?.on('data', check);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`gateway exited with ${code}:\n${out}`));
    });
  });
  return { child, url, output: () => out, exited };
}

/** Runs the gateway expecting it to stop by itself (e.g. a bad config). */
export function runGatewayToExit(env: Record<string, string>, cwd?: string): Promise<{ code: number | null; output: string }> {
  const child = spawn(process.execPath, [MAIN], { env: { PATH: process.env.PATH ?? '', PORT: '0', ...env }, cwd, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout?.on('data', (d: Buffer) => {
    out += d.toString();
  });
  child.stderr?.on('data', (d: Buffer) => {
    out += d.toString();
  });
  const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
  return new Promise((resolve) =>
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, output: out });
    }),
  );
}

/** One short chat completion of the demo catalogue's `mistral/small` to a gateway at `url` (a spawned one), with `key`. */
export function chatOnce(url: string, key: string): Promise<Response> {
  return fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'mistral/small', messages: [{ role: 'user', content: 'hi' }] }),
  });
}
