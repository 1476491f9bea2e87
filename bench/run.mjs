// The gateway against direct, same run: `npm run bench` (full, writes docs/performance.md)
// or `node bench/run.mjs --quick` (the CI regression guard; exits 1 on a large regression).
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startCpuMonitor } from './lib/cpu-monitor.mjs';
import { checkGuard } from './lib/guard.mjs';
import { machineFacts } from './lib/machine.mjs';
import { killChildrenOnExit, pinSelf, removeIfInterrupted } from './lib/processes.mjs';
import { renderMarkdown, renderTables } from './lib/report.mjs';
import { burstOfStreams, compareHttp, compareStreams, holdIdle, readOnceIdle } from './lib/scenarios.mjs';
import { startFloorProxy, startGateway, startPostgresPinned, startRedis, startUpstream } from './lib/services.mjs';

const ROOT = new URL('../', import.meta.url).pathname;
const GATEWAY_CORE = 0;
const LOAD_CORE = 1;

const PLANS = {
  full: {
    rounds: 3,
    roundS: 4,
    warmupS: 2,
    prodRounds: 2,
    prodRoundS: 3,
    floorRounds: 2,
    floorRoundS: 3,
    // The Fastify floor has only the 0 ms row, a capacity ratio that is steady over 2 s rounds.
    fastifyRoundS: 2,
    burst: 1000,
    settleS: 3,
    // The gateway hands memory back after 30 s without a request; its idle check runs once a second (at once
    // when overdue), and what it hands back settles in about a second (jemalloc purges what is unused for 1 s).
    onceIdle: { idleS: 32, waitS: 1.5, settleS: 2 },
    // Under 5 minutes: about 4.8 of load and set-up on a quiet machine, and at most `quietBudgetS`
    // more waiting for other processes to quieten.
    expectedMinutes: 4.8,
    quietBudgetS: 10,
    // The direct side's warm-up for non-streamed load once the upstream and the load driver have served it;
    // streams keep their full warm-up (docs/decisions.md, "The full bench stays under 5 minutes").
    directRewarmS: 1,
    streamConcurrency: 50,
    warmupMaxS: 10,
  },
  // Quick streams run 10 at a time: at 50 the gateway's core is busy enough that queueing makes the TTFT ratio noisy.
  quick: { rounds: 2, roundS: 2, warmupS: 1, streamConcurrency: 10, warmupMaxS: 7, quietBudgetS: 15 },
};

const log = (line) => process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${line}\n`);

/** The scenarios of one gateway setup; `prefix` names them in the results (http0 or prodHttp0, …). */
async function runSet({ ctx, gateway, prefix, rounds, roundS, warmupS, only }) {
  const s = {};
  const name = (id) => (prefix ? `${prefix}${id[0].toUpperCase()}${id.slice(1)}` : id);
  const base = { upstream: ctx.upstream, gateway, monitor: ctx.monitor, rounds, roundS, warmupS, directWarm: ctx.directWarm };
  const all = {
    // The first scenario of a fresh process: warmed up until its JIT has settled (scenarios.mjs).
    http0: () => compareHttp({ ...base, upstreamModel: 'fixed-0ms', connections: 50, warmupS: warmupS * 2, warmupMaxS: ctx.plan.warmupMaxS }),
    http50: () => compareHttp({ ...base, upstreamModel: 'fixed-50ms', connections: 50 }),
    http0c1: () => compareHttp({ ...base, upstreamModel: 'fixed-0ms', connections: 1, rounds: 2, roundS: 2, warmupS: 1 }),
    stream: () => compareStreams({ ...base, upstreamModel: 'stream-50ms-20x10ms', concurrency: ctx.plan.streamConcurrency }),
    burst: () => burstOfStreams({ ...base, upstreamModel: 'stream-50ms-20x100ms', count: ctx.plan.burst, settleMs: ctx.plan.settleS * 1000 }),
  };
  for (const id of only) {
    log(`${prefix || 'embedded'}: ${id}`);
    s[name(id)] = await all[id]();
  }
  return s;
}

/** One instance, embedded defaults: PGlite store, in-process limiter, budget ledger and stream buffers. */
async function embeddedScenarios(ctx, quick, attempt = 1) {
  const { plan } = ctx;
  const gateway = await startGateway({ core: GATEWAY_CORE, dir: ctx.dir, name: `gateway-embedded-${attempt}`, upstreamUrl: ctx.upstream.url });
  ctx.stops.push(gateway.stop);
  const only = quick ? ['http0', 'stream'] : ['http0', 'http50', 'http0c1', 'stream', 'burst'];
  const s = await runSet({ ctx, gateway, prefix: '', rounds: plan.rounds, roundS: plan.roundS, warmupS: plan.warmupS, only });
  if (quick) await gateway.stop();
  else await readLaterOnceIdle(ctx, gateway, s.burst.memory, gateway.stop);
  return s;
}

/**
 * The floors: the smallest proxy of the 0 ms call on node:http and on Fastify (bench/upstream/floor-proxy.mjs),
 * on the gateway's core, against direct as the gateway is: what the gateway's own work costs above them.
 * The node:http floor also takes the latency scenarios (50 ms upstream; streams, relayed byte for byte): what
 * a Node proxy that does nothing else adds there, on this core, under the same synchronised load; and the
 * burst of streams, for the memory it holds them with.
 */
async function floorScenarios(ctx) {
  const { plan } = ctx;
  const s = {};
  // The node:http floor runs every scenario the gateway's is compared on; the Fastify floor only the 0 ms row.
  for (const { id, kind, roundS, allScenarios } of [
    { id: 'floorNodeHttp', kind: 'node-http', roundS: plan.floorRoundS, allScenarios: true },
    { id: 'floorFastify', kind: 'fastify', roundS: plan.fastifyRoundS, allScenarios: false },
  ]) {
    log(`floor: ${kind}`);
    const proxy = await startFloorProxy({ core: GATEWAY_CORE, dir: ctx.dir, kind, upstreamUrl: ctx.upstream.url });
    ctx.stops.push(proxy.stop);
    const base = { upstream: ctx.upstream, gateway: proxy, monitor: ctx.monitor, rounds: plan.floorRounds, roundS, directWarm: ctx.directWarm };
    s[id] = await compareHttp({ ...base, upstreamModel: 'fixed-0ms', connections: 50, warmupS: plan.warmupS, warmupMaxS: plan.warmupMaxS });
    if (allScenarios) {
      s[`${id}Http50`] = await compareHttp({ ...base, upstreamModel: 'fixed-50ms', connections: 50, warmupS: plan.warmupS });
      s[`${id}Stream`] = await compareStreams({ ...base, upstreamModel: 'stream-50ms-20x10ms', concurrency: plan.streamConcurrency, warmupS: plan.warmupS });
      // Its memory under the same burst, after its own scenarios as the gateway's is: what Node needs for them.
      s[`${id}Burst`] = await burstOfStreams({
        ...base,
        upstreamModel: 'stream-50ms-20x100ms',
        count: plan.burst,
        settleMs: plan.settleS * 1000,
        withDirect: false,
      });
    }
    await proxy.stop();
  }
  return s;
}

/**
 * Holds a gateway after its last scenario while the next setups are measured on its core; main reads its
 * memory once idle (into `memory`: its burst's) and then calls `stop`.
 */
async function readLaterOnceIdle(ctx, gateway, memory, stop) {
  const held = await holdIdle(gateway);
  ctx.onceIdleReadings.push(async () => {
    await readOnceIdle(gateway, memory, held, ctx.plan.onceIdle);
    await stop();
  });
}

/** The scaled-out setup: PostgreSQL store and Redis (limiter, ledger, stream buffers, revocations); then Redis killed. */
async function productionScenarios(ctx) {
  const { plan } = ctx;
  const postgres = await startPostgresPinned({ core: LOAD_CORE });
  if (postgres) ctx.stops.push(postgres.stop);
  const redis = await startRedis({ core: LOAD_CORE, dir: ctx.dir });
  ctx.stops.push(redis.kill);
  ctx.setups.prod = `${postgres ? 'PostgreSQL' : 'PGlite (PostgreSQL is not installed)'} + Redis`;
  const gateway = await startGateway({
    core: GATEWAY_CORE,
    dir: ctx.dir,
    name: 'gateway-prod',
    upstreamUrl: ctx.upstream.url,
    redisUrl: redis.url,
    databaseUrl: postgres?.url ?? null,
  });
  ctx.stops.push(gateway.stop);
  const set = { ctx, gateway, prefix: 'prod', rounds: plan.prodRounds, roundS: plan.prodRoundS, warmupS: plan.warmupS };
  const s = await runSet({ ...set, only: ['http0', 'http50', 'stream', 'burst'] });
  await redis.kill();
  Object.assign(s, await runSet({ ...set, prefix: 'redisDown', only: ['http50'] }));
  // Its memory once idle is read after its last scenario, Redis killed; PostgreSQL stays for it.
  await readLaterOnceIdle(ctx, gateway, s.prodBurst.memory, async () => {
    await gateway.stop();
    await postgres?.stop();
  });
  return s;
}

/**
 * The direct side's warm-up: `directRewarmS` for non-streamed load once the upstream process and this load
 * driver have served it earlier in the run; in full otherwise (and always in the quick plan).
 */
function directWarmup(plan) {
  let servedHttp = false;
  return (kind, warmupS) => {
    if (kind !== 'http' || plan.directRewarmS === undefined) return warmupS;
    if (!servedHttp) {
      servedHttp = true;
      return warmupS;
    }
    return Math.min(warmupS, plan.directRewarmS);
  };
}

function writeResults(name, results) {
  mkdirSync(join(ROOT, 'bench/results'), { recursive: true });
  writeFileSync(join(ROOT, 'bench/results', name), `${JSON.stringify(results, null, 2)}\n`);
}

function reportGuard(scenarios) {
  const checks = checkGuard(scenarios);
  for (const c of checks) log(`guard: ${c.ok ? 'ok  ' : 'FAIL'} ${c.label}: ${c.value.toFixed(2)} (${c.bound})`);
  return checks.every((c) => c.ok);
}

async function main() {
  if (Number(process.versions.node.split('.')[0]) < 24) {
    log(`needs Node >= 24 (the gateway runs on this binary), not ${process.version}: use \`npm run bench\` or \`npx node bench/run.mjs\``);
    return 2;
  }
  const quick = process.argv.includes('--quick');
  killChildrenOnExit();
  pinSelf(LOAD_CORE);
  const plan = quick ? PLANS.quick : PLANS.full;
  const ctx = {
    plan,
    dir: mkdtempSync(join(tmpdir(), 'gw-bench-')),
    stops: [],
    onceIdleReadings: [],
    setups: { embedded: 'PGlite + in-process' },
    directWarm: directWarmup(plan),
  };
  removeIfInterrupted(ctx.dir);
  const started = performance.now();
  const monitor = startCpuMonitor({ budgetMs: plan.quietBudgetS * 1000 });
  ctx.monitor = monitor;
  try {
    ctx.upstream = await startUpstream({ core: LOAD_CORE, dir: ctx.dir });
    ctx.stops.push(ctx.upstream.stop);
    let scenarios = await embeddedScenarios(ctx, quick);
    // A loaded CI machine can spoil one short run; a real regression fails the second one too.
    if (quick && !reportGuard(scenarios)) {
      log('guard failed once; measuring again');
      scenarios = await embeddedScenarios(ctx, quick, 2);
    }
    if (!quick) {
      // Each gateway is held after its last scenario while the next setups run on its core, then read once idle.
      Object.assign(scenarios, await productionScenarios(ctx), await floorScenarios(ctx));
      for (const finish of ctx.onceIdleReadings) await finish();
    }
    const otherCpu = monitor.stop();
    const results = {
      mode: quick ? 'quick' : 'full',
      machine: machineFacts(),
      plan: ctx.plan,
      setups: ctx.setups,
      otherCpu,
      durationS: (performance.now() - started) / 1000,
      scenarios,
    };
    process.stdout.write(`\n${renderTables(results)}\n\n`);
    log(
      `done in ${results.durationS.toFixed(0)} s; other processes used ${otherCpu.meanCores.toFixed(2)} cores on average (busiest second ${otherCpu.maxCores.toFixed(2)})`,
    );
    if (quick) {
      writeResults('quick.json', results);
      return reportGuard(scenarios) ? 0 : 1;
    }
    writeResults('latest.json', results);
    writeFileSync(join(ROOT, 'docs/performance.md'), renderMarkdown(results));
    log('wrote docs/performance.md and bench/results/latest.json');
    return 0;
  } catch (err) {
    log(`failed: ${err instanceof Error ? err.stack : err}\n  logs of the processes: ${ctx.dir}`);
    ctx.keepDir = true;
    return 2;
  } finally {
    monitor.stop();
    for (const stop of ctx.stops.reverse()) await stop().catch(() => {});
    if (ctx.keepDir || process.env.GW_BENCH_KEEP_LOGS) log(`logs of the processes: ${ctx.dir}`);
    else rmSync(ctx.dir, { recursive: true, force: true });
  }
}

process.exitCode = await main();
