import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

// The built lock module, as a gateway's start runs it (tsc -b before the tests, as for helpers/process.ts's MAIN).
const LOCK_MODULE = new URL('../dist/store/data-dir-lock.js', import.meta.url).href;
const STARTS = 12;
const ROUNDS = 8;

let root: string;

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'gw-data-dir-lock-race-'));
});

afterAll(() => {
  rmSync(root, { recursive: true, force: true });
});

/** A start that takes the lock once told to on stdin, says whether it got it, and holds it until its stdin ends. */
const START = `
const { lockDataDir } = await import(${JSON.stringify(LOCK_MODULE)});
const dir = process.argv[1];
process.stdout.write('ready\\n');
process.stdin.once('data', async () => {
  try {
    await lockDataDir(dir);
    process.stdout.write('won\\n');
  } catch (err) {
    process.stdout.write('lost ' + err.message + '\\n');
  }
  process.stdin.once('end', () => process.exit(0));
  process.stdin.resume();
});
`;

function start(dir: string) {
  const child = spawn(process.execPath, ['--input-type=module', '-e', START, dir], { stdio: ['pipe', 'pipe', 'inherit'] });
  let out = '';
  const said = (word: RegExp) =>
    new Promise<string>((resolve, reject) => {
      const check = () => {
        const line = out.split('\n').find((l) => word.test(l));
        if (line !== undefined) resolve(line);
      };
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        check();
      });
      child.once('exit', (code) => reject(new Error(`exited ${code}: ${out}`)));
      check();
    });
  const ready = said(/^ready$/);
  const outcome = said(/^(won|lost)/);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return { child, ready, outcome, exited };
}

/** A pid no process has now: a child that ran and ended. */
function deadPid(): number {
  const pid = Number(execFileSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))']).toString());
  expect(existsSync(`/proc/${pid}`)).toBe(false);
  return pid;
}

describe('one embedded store, one gateway, when starts race', () => {
  it(`gives a lock left by a gateway that is gone to exactly one of ${STARTS} starts at once, each of ${ROUNDS} times`, async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const dir = join(root, `round-${round}`);
      rmSync(dir, { recursive: true, force: true });
      execFileSync('mkdir', ['-p', dir]);
      writeFileSync(join(dir, 'pglite.lock'), `${deadPid()} 1`);
      const starts = Array.from({ length: STARTS }, () => start(dir));
      try {
        await Promise.all(starts.map((s) => s.ready));
        for (const s of starts) s.child.stdin.write('go\n');
        const outcomes = await Promise.all(starts.map((s) => s.outcome));
        const won = outcomes.filter((o) => o === 'won');
        expect(won, `round ${round}: ${outcomes.join(' | ')}`).toHaveLength(1);
        for (const o of outcomes) if (o !== 'won') expect(o).toMatch(/^lost the embedded database in .* is in use by process \d+;/);
        // Nothing of the takeover is left beside the lock.
        expect(readdirSync(dir)).toEqual(['pglite.lock']);
      } finally {
        for (const s of starts) s.child.stdin.end();
        await Promise.all(starts.map((s) => s.exited));
      }
    }
  }, 120_000);
});
