// V8's collections in the gateway's main thread under one load:
// `npm run build && node bench/gc-trace.mjs [seconds] [--prod] [-- extra node flags]`.
// PROFILE_ONLY picks the load (bench/lib/profile-runs.mjs). From --trace-gc-nvp lines in the gateway's log, in the
// load window (after 2 s of warm-up): count, pause total / p50 / max of each kind of collection, and the bytes a
// young-generation collection copied (survived in new space) and promoted, per request.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PROFILE_LOADS, runProfiles } from './lib/profile-runs.mjs';

const seconds = Number(process.argv.find((a) => /^\d+$/.test(a)) ?? 10);
const prod = process.argv.includes('--prod');
const dash = process.argv.indexOf('--');
const extra = dash >= 0 ? process.argv.slice(dash + 1) : [];

/** The name=value pairs of one --trace-gc-nvp line, with the isolate's address. */
function parseNvp(line) {
  const m = /^\[\d+:(0x[0-9a-f]+)(?::\d+)?\]\s+[\d.]+ ms: (.*)$/.exec(line);
  if (!m) return null;
  const fields = { isolate: m[1] };
  for (const pair of m[2].split(/\s+/)) {
    const eq = pair.indexOf('=');
    if (eq > 0) fields[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  return fields.gc ? fields : null;
}

async function traceOne(name, { dir, startGateway }) {
  const gateway = await startGateway(['--trace-gc-nvp', ...extra]);
  const logFile = join(dir, `gateway-${name}.log`);
  let outcome;
  let fromLine = 0;
  try {
    await PROFILE_LOADS[name](gateway, 2);
    fromLine = readFileSync(logFile, 'utf8').split('\n').length;
    outcome = await PROFILE_LOADS[name](gateway, seconds);
  } finally {
    await gateway.stop();
  }
  const events = readFileSync(logFile, 'utf8').split('\n').slice(fromLine).map(parseNvp).filter(Boolean);
  // The main thread's isolate collects most often; the database thread has its own.
  const perIsolate = new Map();
  for (const e of events) perIsolate.set(e.isolate, (perIsolate.get(e.isolate) ?? 0) + 1);
  const main = [...perIsolate].sort((a, b) => b[1] - a[1])[0]?.[0];
  const kinds = new Map();
  let survived = 0;
  let promoted = 0;
  for (const e of events) {
    const kind = `${e.isolate === main ? 'main' : 'other'} ${e.gc}${e.reduce_memory === '1' ? ' (reduce)' : ''}`;
    const k = kinds.get(kind) ?? { pauses: [] };
    k.pauses.push(Number(e.pause));
    kinds.set(kind, k);
    if (e.isolate === main && e.gc === 's') {
      survived += Number(e.new_space_survived ?? 0);
      promoted += Number(e.promoted ?? 0);
    }
  }
  const rows = [...kinds].map(([kind, { pauses }]) => {
    pauses.sort((a, b) => a - b);
    const sum = pauses.reduce((s, p) => s + p, 0);
    return `  ${kind.padEnd(18)} ${String(pauses.length).padStart(5)} x  total ${sum.toFixed(1).padStart(7)} ms  p50 ${pauses[Math.floor(pauses.length / 2)].toFixed(2).padStart(6)}  max ${pauses.at(-1).toFixed(2).padStart(6)}`;
  });
  const units = outcome.done;
  return [
    `== ${name}: ${outcome.text} (${extra.join(' ') || 'no extra flags'}) ==`,
    ...rows,
    `  main thread per unit of work: ${(survived / units / 1024).toFixed(2)} KB copied in new space, ${(promoted / units / 1024).toFixed(2)} KB promoted`,
  ].join('\n');
}

process.exitCode = await runProfiles({ tool: 'gc-trace', prod, names: Object.keys(PROFILE_LOADS) }, traceOne);
