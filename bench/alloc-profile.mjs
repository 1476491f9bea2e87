// Where the gateway allocates under load: `npm run build && node bench/alloc-profile.mjs [seconds] [--prod]`.
// The gateway runs with --inspect; V8's sampling heap profiler counts every sampled allocation,
// including objects the young and old generation collections have already freed, so the bytes per
// request by allocation site are what drives the collector (unlike a heap snapshot, which holds
// only survivors). `burst` is the other way round: what 1,000 open streams hold, sampled
// once all are open, after a full collection, so only live objects count.
// PROFILE_ONLY=stream (http-0ms, burst): one load only; PROFILE_STREAM_MODEL and KEEP=1 as for profile.mjs;
// PROFILE_REDIS_KILLED=1 with --prod: Redis killed once the gateway is up (one load only);
// PROMOTED=1: only what outlived a young-generation collection (what was promoted, and drives the major ones).
// Summaries go to stdout and bench/results/.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { chatRequest, PROFILE_LOADS, runProfiles } from './lib/profile-runs.mjs';
import { runStreamBurst } from './lib/stream-driver.mjs';

const ROOT = new URL('../', import.meta.url).pathname;
const seconds = Number(process.argv.find((a) => /^\d+$/.test(a)) ?? 5);
const prod = process.argv.includes('--prod');
const INSPECT_PORT = 9339;

/** Live objects at the moment `count` streams are open at once. */
async function liveAtBurstPeak(gateway, cdp, count) {
  await cdp.send('HeapProfiler.startSampling', { samplingInterval: 1024 });
  let peak = null;
  const burst = await runStreamBurst({
    ...chatRequest(gateway, 'stream-50ms-20x400ms', true),
    count,
    onSample: (open) => {
      if (peak || open < count) return;
      peak = cdp.send('HeapProfiler.collectGarbage').then(() => cdp.send('HeapProfiler.getSamplingProfile'));
    },
  });
  await cdp.send('HeapProfiler.stopSampling');
  if (!peak) throw new Error(`the streams were never all open at once (at most ${burst.peakOpen} of ${count})`);
  return { profile: (await peak).profile, done: count, text: `${burst.ok} of ${count} streams completed, all open at once` };
}

/** A minimal Chrome DevTools Protocol client over the inspector's WebSocket. */
async function devtools(port) {
  const [target] = await (await fetch(`http://127.0.0.1:${port}/json/list`)).json();
  const ws = new WebSocket(target.webSocketDebuggerUrl);
  await new Promise((resolve, reject) => {
    ws.onopen = resolve;
    ws.onerror = reject;
  });
  let nextId = 1;
  const waiting = new Map();
  ws.onmessage = (event) => {
    const msg = JSON.parse(event.data);
    const call = waiting.get(msg.id);
    if (!call) return;
    waiting.delete(msg.id);
    if (msg.error) call.reject(new Error(msg.error.message));
    else call.resolve(msg.result);
  };
  return {
    send: (method, params = {}) =>
      new Promise((resolve, reject) => {
        const id = nextId++;
        waiting.set(id, { resolve, reject });
        ws.send(JSON.stringify({ id, method, params }));
      }),
    close: () => ws.close(),
  };
}

function where(frame) {
  const url = frame.url
    .replace(/^file:\/\//, '')
    .replace(/^.*\/node_modules\//, '')
    .replace(/^.*\/packages\//, 'packages/');
  return `${frame.functionName || '(anonymous)'}  ${url ? `${url}:${frame.lineNumber + 1}` : ''}`;
}

/** Bytes by allocating function (self), and by function with its callers' chain (three deep), per unit of work. */
function summarise(profile, units) {
  const self = new Map();
  const chains = new Map();
  const walk = (node, stack) => {
    const here = [where(node.callFrame), ...stack];
    if (node.selfSize > 0) {
      self.set(here[0], (self.get(here[0]) ?? 0) + node.selfSize);
      const chain = here.slice(0, 4).join('  <  ');
      chains.set(chain, (chains.get(chain) ?? 0) + node.selfSize);
    }
    for (const child of node.children) walk(child, here);
  };
  walk(profile.head, []);
  const total = [...self.values()].reduce((a, b) => a + b, 0);
  const rank = (map, n) =>
    [...map.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, n)
      .map(
        ([k, bytes], i) =>
          `${String(i + 1).padStart(3)}. ${(bytes / units / 1024).toFixed(2).padStart(7)} KB  ${((bytes / total) * 100).toFixed(1).padStart(5)} %  ${k}`,
      );
  return [
    `sampled ${(total / 1024 / 1024).toFixed(0)} MB over ${units} units of work: ${(total / units / 1024).toFixed(1)} KB each`,
    '',
    'bytes per unit by allocating function',
    ...rank(self, 30),
    '',
    'bytes per unit by allocation site with callers',
    ...rank(chains, 30),
  ].join('\n');
}

async function profileOne(name, { startGateway }) {
  const gateway = await startGateway([`--inspect=127.0.0.1:${INSPECT_PORT}`]);
  let cdp;
  try {
    await PROFILE_LOADS[name === 'burst' ? 'stream' : name](gateway, 2);
    cdp = await devtools(INSPECT_PORT);
    await cdp.send('HeapProfiler.enable');
    if (name === 'burst') return report(name, await liveAtBurstPeak(gateway, cdp, 1000));
    // PROMOTED=1 leaves out what the young generation's collections freed: what is left is what was
    // promoted to the old generation (and what the major collections then had to mark and sweep).
    const promotedOnly = process.env.PROMOTED === '1';
    await cdp.send('HeapProfiler.startSampling', {
      samplingInterval: 1024,
      includeObjectsCollectedByMajorGC: true,
      includeObjectsCollectedByMinorGC: !promotedOnly,
    });
    const outcome = await PROFILE_LOADS[name](gateway, seconds);
    const { profile } = await cdp.send('HeapProfiler.stopSampling');
    return report(name, { ...outcome, profile });
  } finally {
    cdp?.close();
    await gateway.stop();
  }
}

function report(name, { profile, done, text: outcome }) {
  const what = name === 'burst' ? 'live objects' : 'allocations';
  const text = `== gateway ${what} (${prod ? 'PostgreSQL + Redis' : 'embedded'}) under ${name} load: ${outcome} ==\n${summarise(profile, done)}`;
  mkdirSync(join(ROOT, 'bench/results'), { recursive: true });
  const base = join(ROOT, `bench/results/alloc-${name}${prod ? '-prod' : ''}`);
  writeFileSync(`${base}.txt`, `${text}\n`);
  // The whole sampling profile, for Chrome DevTools (Memory > Load profile).
  writeFileSync(`${base}.heapprofile`, JSON.stringify(profile));
  return text;
}

process.exitCode = await runProfiles({ tool: 'alloc-profile', prod, names: [...Object.keys(PROFILE_LOADS), 'burst'] }, profileOne);
