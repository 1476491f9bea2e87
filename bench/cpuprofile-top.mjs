// Summarises a V8 .cpuprofile: `node bench/cpuprofile-top.mjs file.cpuprofile [count]`.
// Self time per function (file:line), self time per package, and inclusive time of the gateway's own functions.
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

const PSEUDO = new Set(['(idle)', '(program)', '(garbage collector)', '(root)']);

function where(frame) {
  const url = frame.url.replace(/^file:\/\//, '');
  const short = url.replace(/^.*\/node_modules\//, '').replace(/^.*\/packages\//, 'packages/');
  return short ? `${short}:${frame.lineNumber + 1}` : '';
}

/** Which package a frame belongs to: an npm package, our workspace package, node internals, or V8's pseudo-frames. */
function packageOf(frame) {
  if (PSEUDO.has(frame.functionName) && frame.url === '') return frame.functionName;
  const nm = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(frame.url);
  if (nm) return nm[1];
  const ws = /\/packages\/([^/]+)\//.exec(frame.url);
  if (ws) return `@gw/${ws[1]}`;
  if (frame.url.startsWith('node:') || frame.url === '') return 'node internals / native';
  return frame.url;
}

function keyOf(frame) {
  return `${frame.functionName || '(anonymous)'}\t${where(frame)}`;
}

function addTo(map, key, value) {
  map.set(key, (map.get(key) ?? 0) + value);
}

function ranked(map, total, count) {
  return [...map.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, count)
    .map(([key, us]) => ({ key, ms: us / 1000, pct: (us / total) * 100 }));
}

/**
 * Self and inclusive times from a .cpuprofile's samples and time deltas (µs).
 * `fromMs`/`toMs` keep only the samples in that window, in ms from the
 * profile's start (e.g. the load, without start-up and shutdown).
 */
export function summariseProfile(profile, { count = 15, fromMs = 0, toMs = Number.POSITIVE_INFINITY } = {}) {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const self = new Map();
  const packages = new Map();
  const inclusive = new Map();
  let total = 0;
  let idle = 0;
  let at = 0;
  profile.samples.forEach((id, i) => {
    const dt = profile.timeDeltas[i] ?? 0;
    at += dt;
    if (at < fromMs * 1000 || at > toMs * 1000) return;
    const node = byId.get(id);
    total += dt;
    if (node.callFrame.functionName === '(idle)') idle += dt;
    addTo(self, keyOf(node.callFrame), dt);
    addTo(packages, packageOf(node.callFrame), dt);
    const seen = new Set();
    for (let up = id; up !== undefined; up = parent.get(up)) {
      const frame = byId.get(up).callFrame;
      if (!frame.url.includes('/packages/server/dist/')) continue;
      const key = keyOf(frame);
      if (!seen.has(key)) addTo(inclusive, key, dt);
      seen.add(key);
    }
  });
  return {
    totalMs: total / 1000,
    busyPct: ((total - idle) / total) * 100,
    self: ranked(self, total, count),
    packages: ranked(packages, total, count),
    inclusive: ranked(inclusive, total, count),
  };
}

function print(title, rows) {
  const lines = rows.map(
    (r, i) => `${String(i + 1).padStart(3)}. ${r.pct.toFixed(1).padStart(5)} %  ${r.ms.toFixed(0).padStart(6)} ms  ${r.key.replace('\t', '  ')}`,
  );
  return `${title}\n${lines.join('\n')}`;
}

export function renderProfile(summary) {
  return [
    `sampled ${summary.totalMs.toFixed(0)} ms, busy ${summary.busyPct.toFixed(1)} % (the rest idle)`,
    print('self time by function (% of all samples)', summary.self),
    print('self time by package', summary.packages),
    print('inclusive time of packages/server functions', summary.inclusive),
  ].join('\n\n');
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const file = process.argv[2];
  if (!file) {
    console.error('usage: node bench/cpuprofile-top.mjs <file.cpuprofile> [count]');
    process.exit(2);
  }
  const profile = JSON.parse(readFileSync(file, 'utf8'));
  console.log(renderProfile(summariseProfile(profile, { count: Number(process.argv[3] ?? 15) })));
}
