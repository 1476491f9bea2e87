import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { closeSync, constants, mkdtempSync, openSync, readSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { MAIN } from './helpers/process.js';

/** A request whose log lines are long (its path, a 404): about 8 KB of log each. */
const LONG_PATH = `/${'a'.repeat(4000)}`;

/** Log lines dropped so far, as /metrics says. */
async function dropped(url: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return Number(/^gw_log_lines_dropped_total (\d+)/m.exec(text)?.[1] ?? Number.NaN);
}

/**
 * Sends requests with long log lines, one at a time (no burst fills the buffer by itself), until the log has dropped
 * more than `before`: the pipe and the buffer are full. Each is answered, none held by the log.
 */
async function fillLog(url: string, before: number): Promise<number> {
  for (let i = 1; i <= 200; i++) {
    const answer = await fetch(`${url}${LONG_PATH}`, { signal: AbortSignal.timeout(3_000) });
    expect(answer.status).toBe(404);
    await answer.text();
    if (i % 5 > 0) continue;
    const n = await dropped(url);
    if (n > before) return n;
  }
  throw new Error('no log line dropped');
}

describe('a stdout whose reader stalls', () => {
  const dir = mkdtempSync(join(tmpdir(), 'gw-log-'));
  let child: ChildProcess | undefined;
  afterAll(() => {
    child?.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });

  it('drops lines past GW_LOG_BUFFER_KB, says how many once read again, and a SIGTERM exits within GW_SHUTDOWN_TIMEOUT_MS', async () => {
    // stdout is a pipe (64 KiB) read only when the test says: a log pipeline that stops reading.
    const fifo = join(dir, 'stdout');
    execFileSync('mkfifo', [fifo]);
    const reader = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
    const writer = openSync(fifo, constants.O_WRONLY);
    const env = { PATH: process.env.PATH ?? '', PORT: '0', GW_DATA_DIR: dir, GW_LOG_BUFFER_KB: '16', GW_SHUTDOWN_TIMEOUT_MS: '1000' };
    const gw = spawn(process.execPath, [MAIN], { env, stdio: ['ignore', writer, 'ignore'] });
    child = gw;
    closeSync(writer);
    const exited = new Promise<number | null>((resolve) => gw.once('exit', resolve));
    let out = '';
    const buf = Buffer.alloc(1 << 16);
    const read = () => {
      for (;;) {
        try {
          const n = readSync(reader, buf);
          if (n === 0) return out;
          out += buf.toString('utf8', 0, n);
        } catch {
          return out; // EAGAIN: nothing more now
        }
      }
    };
    await expect.poll(() => /listening on (http:\/\/[\d.]+:\d+)/.test(read()), { timeout: 15_000, interval: 50 }).toBe(true);
    const url = /listening on (http:\/\/[\d.]+:\d+)/.exec(out)?.[1] ?? '';

    // Not read: the pipe fills, then the gateway's buffer; requests are answered all the same.
    const first = await fillLog(url, 0);
    // Read again: the next write says what was dropped, in one warning; every line is whole.
    await expect.poll(() => /lines dropped past the 16 KiB buffer/.test(read()), { timeout: 3_000, interval: 50 }).toBe(true);
    const lines = out.split('\n').filter((l) => l.startsWith('{'));
    const said = lines.map((l) => JSON.parse(l) as { droppedLogLines?: number }).find((l) => l.droppedLogLines !== undefined);
    expect(said?.droppedLogLines).toBeGreaterThanOrEqual(first);

    // Not read again: the drain's exit does not wait for the reader past its bound.
    await fillLog(url, said?.droppedLogLines ?? 0);
    const sent = Date.now();
    gw.kill('SIGTERM');
    const code = await Promise.race([exited, new Promise((r) => setTimeout(() => r('still running'), 3_000))]);
    expect(code).toBe(0);
    expect(Date.now() - sent).toBeLessThan(2_500);
    closeSync(reader);
  }, 25_000);
});
