import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { GatewayProcess } from './process.js';

/**
 * The wall clock stepped under a running gateway, as NTP or an operator does: loaded before the gateway, this steps
 * Date.now and `new Date()`, on SIGUSR2, by the milliseconds the step file holds. Only the wall clock moves; the
 * monotonic clock runs on, as it does when the system's clock is stepped. GW_TEST_CLOCK_START_OFFSET: a process started
 * with its clock that far off (the wall time at its start, `performance.timeOrigin`, too).
 */
const STEP_CLOCK = `
import { readFileSync } from 'node:fs';
const RealDate = globalThis.Date;
const wall = RealDate.now;
let offset = Number(process.env.GW_TEST_CLOCK_START_OFFSET ?? 0);
const origin = performance.timeOrigin + offset;
Object.defineProperty(performance, 'timeOrigin', { get: () => origin });
class SteppedDate extends RealDate {
  constructor(...args) {
    if (args.length === 0) super(wall() + offset);
    else super(...args);
  }
  static now() {
    return wall() + offset;
  }
}
globalThis.Date = SteppedDate;
process.on('SIGUSR2', () => {
  offset += Number(readFileSync(process.env.GW_TEST_CLOCK_STEP_FILE, 'utf8'));
  process.stderr.write('wall clock stepped by ' + offset + '\\n');
});
`;

/** The environment of a gateway whose wall clock {@link stepWallClock} can step, started `startOffsetMs` off; its files go in `dir`. */
export function steppableClockEnv(dir: string, startOffsetMs = 0): Record<string, string> {
  writeFileSync(join(dir, 'step-clock.mjs'), STEP_CLOCK);
  return {
    GW_TEST_CLOCK_STEP_FILE: join(dir, 'step'),
    GW_TEST_CLOCK_START_OFFSET: String(startOffsetMs),
    NODE_OPTIONS: `--import=${pathToFileURL(join(dir, 'step-clock.mjs')).href}`,
  };
}

/** Steps the wall clock of `proc` (started with {@link steppableClockEnv} of `dir`) by `ms` and waits until it has. */
export async function stepWallClock(proc: GatewayProcess, dir: string, ms: number): Promise<void> {
  const before = proc.output().length;
  writeFileSync(join(dir, 'step'), String(ms));
  proc.child.kill('SIGUSR2');
  const deadline = Date.now() + 5000;
  while (!proc.output().slice(before).includes('wall clock stepped')) {
    if (Date.now() > deadline) throw new Error(`the clock was not stepped:\n${proc.output()}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
