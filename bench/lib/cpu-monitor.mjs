import { readFileSync } from 'node:fs';
import { processTree } from './processes.mjs';

const TICKS_PER_S = 100;
const INTERVAL_MS = 250;

/** CPU ticks the whole machine spent busy (user, nice, system, irq, softirq, steal). */
function machineBusyTicks() {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
  return f[0] + f[1] + f[2] + f[5] + f[6] + f[7];
}

function processTicks(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(fields[11]) + Number(fields[12]);
  } catch {
    return null;
  }
}

function ourTicks() {
  return new Map(processTree(process.pid).map((pid) => [pid, processTicks(pid)]));
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Watches how much CPU processes outside this bench (this process and
 * everything it started) use: other work on the machine skews every figure,
 * so rounds can wait for a quiet machine and the report says how much there was.
 */
export function startCpuMonitor({ budgetMs = 60_000 } = {}) {
  const samples = [];
  let lastMachine = machineBusyTicks();
  let lastOurs = ourTicks();
  const timer = setInterval(() => {
    const machine = machineBusyTicks();
    const ours = ourTicks();
    let ourDelta = 0;
    for (const [pid, ticks] of ours) if (ticks !== null) ourDelta += ticks - (lastOurs.get(pid) ?? 0);
    samples.push({ at: performance.now(), cores: Math.max(0, machine - lastMachine - ourDelta) / TICKS_PER_S / (INTERVAL_MS / 1000) });
    lastMachine = machine;
    lastOurs = ours;
  }, INTERVAL_MS);
  timer.unref();
  const meanSince = (t) => {
    const recent = samples.filter((s) => s.at >= t);
    return recent.length ? recent.reduce((a, s) => a + s.cores, 0) / recent.length : 0;
  };
  let waitedMs = 0;
  return {
    /** Cores' worth of CPU that other processes used on average since `t` (performance.now()). */
    meanSince,
    /** Waits (at most `timeoutMs`, and at most `budgetMs` over the run) until other processes used under `maxCores` for a second. */
    async waitForQuiet({ maxCores = 0.15, timeoutMs = 15_000 } = {}) {
      const started = performance.now();
      while (waitedMs + (performance.now() - started) < budgetMs && performance.now() - started < timeoutMs) {
        if (samples.length >= 4 && meanSince(performance.now() - 1000) < maxCores) break;
        await sleep(INTERVAL_MS);
      }
      waitedMs += performance.now() - started;
    },
    /** The mean and the busiest second over the whole run, and how long rounds waited for quiet. */
    stop() {
      clearInterval(timer);
      let maxCores = 0;
      for (let i = 3; i < samples.length; i++)
        maxCores = Math.max(maxCores, (samples[i].cores + samples[i - 1].cores + samples[i - 2].cores + samples[i - 3].cores) / 4);
      return { meanCores: meanSince(0), maxCores, waitedS: waitedMs / 1000 };
    },
  };
}
