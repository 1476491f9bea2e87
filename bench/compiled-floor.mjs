// What any proxy adds on this machine before its own work: the latency targets' scenarios through compiled
// proxies (nginx, HAProxy in HTTP and in TCP mode, from Debian), Node's plain TCP relay, the node:http
// floor and the gateway itself (embedded), each pinned to the gateway's core, against direct in the same run, as `npm run bench` measures the
// gateway. `node bench/compiled-floor.mjs [rounds] [round seconds] [kinds,…]`; writes
// bench/results/compiled-floor.json and prints the table. Not part of `npm run bench` (its 5 minutes).
// Needs `apt-get install -y nginx-light haproxy`; a proxy not installed is left out, and said so.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { COMPILED_PROXIES, compiledProxyInstalled, startCompiledProxy } from './lib/compiled-proxies.mjs';
import { startCpuMonitor } from './lib/cpu-monitor.mjs';
import { machineFacts } from './lib/machine.mjs';
import { killChildrenOnExit, pinSelf, removeIfInterrupted } from './lib/processes.mjs';
import { compareHttp, compareStreams } from './lib/scenarios.mjs';
import { startFloorProxy, startGateway, startUpstream } from './lib/services.mjs';

const ROOT = new URL('../', import.meta.url).pathname;
const GATEWAY_CORE = 0;
const LOAD_CORE = 1;
const ALL_KINDS = ['haproxy-tcp', 'nginx', 'haproxy-http', 'tcp', 'node-http', 'gateway'];
const NODE_FLOORS = new Set(['tcp', 'node-http']);

const [rounds = 3, roundS = 3] = process.argv.slice(2, 4).map(Number);
const kinds = process.argv[4] ? process.argv[4].split(',') : ALL_KINDS;
const log = (line) => process.stderr.write(`[compiled-floor ${new Date().toISOString().slice(11, 19)}] ${line}\n`);
const fmt = (v, digits = 2) => (Number.isFinite(v) ? v.toFixed(digits) : 'n/a');
const added = (r, pick) => pick(r.gateway) - pick(r.direct);

function startProxy(ctx, kind) {
  const options = { core: GATEWAY_CORE, dir: ctx.dir, kind, upstreamUrl: ctx.upstream.url };
  if (kind === 'gateway') return startGateway({ ...options, name: 'gateway' });
  return NODE_FLOORS.has(kind) ? startFloorProxy(options) : startCompiledProxy(options);
}

async function measureKind(ctx, kind) {
  log(`${kind}`);
  const proxy = await startProxy(ctx, kind);
  try {
    // A fresh gateway compiles its request path for its first 5-10 s under load (bench/lib/scenarios.mjs).
    const base = { upstream: ctx.upstream, gateway: proxy, monitor: ctx.monitor, rounds, roundS, warmupS: 2, warmupMaxS: kind === 'gateway' ? 10 : 2 };
    const http50 = await compareHttp({ ...base, upstreamModel: 'fixed-50ms', connections: 50 });
    const stream = await compareStreams({ ...base, upstreamModel: 'stream-50ms-20x10ms', concurrency: 50 });
    return { http50, stream };
  } finally {
    await proxy.stop();
  }
}

function row(kind, { http50, stream }) {
  const cpu = (r) => fmt(r.gateway.cpuUs?.total, 0);
  return `| ${kind} | ${fmt(added(http50, (s) => s.latency.p50))} | ${fmt(added(http50, (s) => s.latency.p99))} | ${cpu(http50)} | ${fmt(
    added(stream, (s) => s.ttft.p50),
  )} | ${fmt(added(stream, (s) => s.ttft.p99))} | ${cpu(stream)} | ${http50.gateway.failed + stream.gateway.failed} |`;
}

function table(results) {
  const head = [
    "| proxy on the gateway's core | added p50, 50 ms upstream, 50 conns | added p99 | CPU µs per request | added TTFT p50, 50 streams | added TTFT p99 | CPU µs per stream | failed |",
    '|---|--:|--:|--:|--:|--:|--:|--:|',
  ];
  return [...head, ...Object.entries(results).map(([kind, r]) => row(kind, r))].join('\n');
}

async function main() {
  if (Number(process.versions.node.split('.')[0]) < 24) {
    log(`needs Node >= 24, not ${process.version}: \`npx node bench/compiled-floor.mjs\``);
    return 2;
  }
  killChildrenOnExit();
  pinSelf(LOAD_CORE);
  const ctx = { dir: mkdtempSync(join(tmpdir(), 'gw-compiled-floor-')) };
  removeIfInterrupted(ctx.dir);
  ctx.monitor = startCpuMonitor({ budgetMs: 20_000 });
  const results = {};
  try {
    ctx.upstream = await startUpstream({ core: LOAD_CORE, dir: ctx.dir });
    for (const kind of kinds) {
      if (kind in COMPILED_PROXIES && !compiledProxyInstalled(kind)) {
        log(`${kind}: not installed (apt-get install -y ${COMPILED_PROXIES[kind].package}), left out`);
        continue;
      }
      results[kind] = await measureKind(ctx, kind);
    }
    const otherCpu = ctx.monitor.stop();
    const out = { machine: machineFacts(), rounds, roundS, otherCpu, results };
    mkdirSync(join(ROOT, 'bench/results'), { recursive: true });
    writeFileSync(join(ROOT, 'bench/results/compiled-floor.json'), `${JSON.stringify(out, null, 2)}\n`);
    process.stdout.write(`\n${table(results)}\n\nOther processes used ${fmt(otherCpu.meanCores)} cores on average.\n`);
    return 0;
  } finally {
    ctx.monitor.stop();
    await ctx.upstream?.stop();
    rmSync(ctx.dir, { recursive: true, force: true });
  }
}

process.exitCode = await main();
