import { readFileSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { mallocEnv } from '../../scripts/malloc-env.mjs';
import { gatewayModelId, UPSTREAM_MODELS } from '../upstream/profiles.mjs';
import { freePort, peakRssBytes, pinProcessTree, rssBytes, spawnPinned, stopChild, threadCpuSeconds, waitForLine } from './processes.mjs';

const ROOT = new URL('../../', import.meta.url).pathname;
/** The gateway's build in this checkout. */
export const GATEWAY_MAIN = join(ROOT, 'packages/server/dist/main.js');
/** package.json `config`: the V8 flags `npm start` runs the gateway with. */
export const START_CONFIG = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).config;
/**
 * Flags added to the gateway's and the floors' own for one run, to compare a setting on their one core
 * (GW_BENCH_ONE_CORE_FLAGS, space-separated; `npm start` adds none). The report names them.
 */
export function benchOneCoreFlags() {
  return (process.env.GW_BENCH_ONE_CORE_FLAGS ?? '').split(/\s+/).filter(Boolean);
}

/** The V8 flags `npm start` runs the gateway with (package.json `config.nodeFlags`): measured as it is run. */
export const PRODUCTION_NODE_FLAGS = START_CONFIG.nodeFlags.split(/\s+/).filter(Boolean);
/** The allocator's environment `npm start` adds (scripts/malloc-env.mjs), for the same reason. */
export const PRODUCTION_PROCESS_ENV = mallocEnv(process.env);
const ADMIN_TOKEN = 'bench-admin-token-0123456789';
/** High enough never to refuse a bench request, low enough to keep the limiter and the budget on the request path. */
export const BENCH_KEY = { name: 'bench', rateLimitRpm: 1_000_000, budget: 1_000_000_000 };

/** The fake OpenAI-compatible upstream, as its own process on the load core. */
export async function startUpstream({ core, dir }) {
  const child = spawnPinned({ core, command: process.execPath, args: [join(ROOT, 'bench/upstream/server.mjs')], logFile: join(dir, 'upstream.log') });
  const [, port] = await waitForLine(child, /upstream listening on (\d+)/, 10_000, 'the fake upstream');
  return { url: `http://127.0.0.1:${port}`, pid: child.pid, stop: () => stopChild(child) };
}

/** A throwaway redis-server (no persistence) on the load core. */
export async function startRedis({ core, dir }) {
  const port = await freePort();
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir];
  const child = spawnPinned({ core, command: '/usr/bin/redis-server', args, logFile: join(dir, 'redis.log') });
  await waitForLine(child, /Ready to accept connections/, 10_000, 'redis-server');
  return { url: `redis://127.0.0.1:${port}`, pid: child.pid, kill: () => stopChild(child, { signal: 'SIGKILL' }) };
}

/** A run measures the allocator it names: fail when the library it preloads is not mapped into the process. */
function assertAllocatorLoaded(pid, processEnv) {
  if (!processEnv.LD_PRELOAD) return;
  const library = basename(processEnv.LD_PRELOAD);
  if (!readFileSync(`/proc/${pid}/maps`, 'utf8').includes(`/${library}`)) {
    throw new Error(`process ${pid} was started with LD_PRELOAD=${processEnv.LD_PRELOAD} but has not loaded ${library}`);
  }
}

function gatewayCatalogue(upstreamUrl) {
  return {
    providers: [{ id: 'bench', type: 'openai', baseUrl: `${upstreamUrl}/v1`, apiKey: 'bench-upstream-key', region: 'local', timeoutMs: 30_000 }],
    models: UPSTREAM_MODELS.map((upstreamModel) => ({
      id: gatewayModelId(upstreamModel),
      kind: 'chat',
      owned_by: 'bench',
      context_window: 32_000,
      capabilities: ['streaming'],
      offers: [{ provider: 'bench', upstreamModel, pricing: { prompt_per_1m: 0.2, completion_per_1m: 0.6, currency: 'EUR' } }],
    })),
  };
}

function gatewayEnv({ dir, name, configFile, redisUrl, databaseUrl, processEnv }) {
  const env = { ...process.env, ...processEnv };
  for (const k of Object.keys(env)) if (k.startsWith('GW_') || k === 'DATABASE_URL' || k === 'REDIS_URL') delete env[k];
  Object.assign(env, {
    PORT: '0',
    HOST: '127.0.0.1',
    GW_CONFIG: configFile,
    GW_DATA_DIR: join(dir, `${name}-data`),
    GW_ADMIN_TOKEN: ADMIN_TOKEN,
    GW_LOG_LEVEL: 'warn',
  });
  if (redisUrl) env.REDIS_URL = redisUrl;
  if (databaseUrl) env.DATABASE_URL = databaseUrl;
  return env;
}

async function createKey(url) {
  const res = await fetch(`${url}/admin/v1/keys`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify(BENCH_KEY),
  });
  if (res.status !== 201) throw new Error(`creating the bench key answered ${res.status}: ${await res.text()}`);
  return (await res.json()).key;
}

/**
 * The built gateway (packages/server/dist/main.js) as its own process pinned
 * to `core`, on embedded PGlite, with a key whose limiter and budget run on
 * every request. `nodeFlags` e.g. ['--cpu-prof', '--cpu-prof-dir=…']; `mainFile` another build of
 * the gateway, to compare two builds in one run.
 */
export async function startGateway({
  core,
  dir,
  name,
  upstreamUrl,
  redisUrl = null,
  databaseUrl = null,
  nodeFlags = [],
  mainFile = GATEWAY_MAIN,
  processEnv = PRODUCTION_PROCESS_ENV,
  nodeBinary = process.execPath,
}) {
  // As `npm start` runs it, plus a run's flags under comparison.
  const flags = [...PRODUCTION_NODE_FLAGS, ...benchOneCoreFlags(), ...nodeFlags];
  const configFile = join(dir, `${name}-config.json`);
  writeFileSync(configFile, JSON.stringify(gatewayCatalogue(upstreamUrl), null, 2));
  const child = spawnPinned({
    core,
    command: nodeBinary,
    args: [...flags, mainFile],
    env: gatewayEnv({ dir, name, configFile, redisUrl, databaseUrl, processEnv }),
    logFile: join(dir, `${name}.log`),
  });
  const [, url] = await waitForLine(child, /listening on (http:\/\/[\d.]+:\d+)/, 60_000, `the gateway (${name})`);
  assertAllocatorLoaded(child.pid, processEnv);
  const key = await createKey(url);
  return { ...measured(child, url, 30_000), key, scrape: () => scrapeMetrics(url) };
}

/**
 * What the scenarios read of a process they load: its address, memory and CPU by thread, and how to stop it.
 * `rssAtStart`: its resident memory once it serves, before any load (the gateway: its bench key created).
 */
export function measured(child, url, stopTimeoutMs) {
  return {
    url,
    pid: child.pid,
    rssAtStart: rssBytes(child.pid),
    rss: () => {
      if (child.exitCode !== null || child.signalCode !== null) {
        throw new Error(`process ${child.pid} exited (${child.signalCode ?? `code ${child.exitCode}`}) in the middle of the run; see ${child.logFile}`);
      }
      return rssBytes(child.pid);
    },
    peakRss: () => peakRssBytes(child.pid),
    threadCpu: () => threadCpuSeconds(child.pid),
    // Held: stopped (SIGSTOP), every thread of it, until released; it keeps what it holds and uses no CPU.
    hold: () => child.kill('SIGSTOP'),
    release: () => child.kill('SIGCONT'),
    stop: () => stopChild(child, { timeoutMs: stopTimeoutMs }),
  };
}

/**
 * A floor proxy (bench/upstream/floor-proxy.mjs: `node-http` or `fastify`) started as the gateway is
 * (same core, flags and environment), with the gateway's shape so that the same scenarios measure it.
 * It has no /metrics: its event-loop figures are n/a.
 */
export async function startFloorProxy({ core, dir, kind, upstreamUrl }) {
  const child = spawnPinned({
    core,
    command: process.execPath,
    args: [...PRODUCTION_NODE_FLAGS, ...benchOneCoreFlags(), join(ROOT, 'bench/upstream/floor-proxy.mjs'), kind, upstreamUrl],
    env: { ...process.env, ...PRODUCTION_PROCESS_ENV },
    logFile: join(dir, `floor-${kind}.log`),
  });
  const [, url] = await waitForLine(child, /listening on (http:\/\/[\d.]+:\d+)/, 30_000, `the ${kind} floor proxy`);
  assertAllocatorLoaded(child.pid, PRODUCTION_PROCESS_ENV);
  return { ...measured(child, url, 10_000), key: 'floor', scrape: async () => ({ eventLoopP99Ms: Number.NaN, eventLoopMaxMs: Number.NaN }) };
}

/**
 * prom-client samples the event loop with a 10 ms timer and records each
 * whole interval (an idle gateway reports a p99 of about 10.4 ms), so a
 * stall is what an interval took beyond it.
 */
const EVENT_LOOP_SAMPLE_MS = 10;

/**
 * The gateway's own process figures from GET /metrics (prom-client defaults).
 * The event-loop delay histogram is reset by every scrape, so a scrape right
 * before and right after a round gives that round's stalls.
 */
export async function scrapeMetrics(url) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const read = (name) => Number(new RegExp(`^gw_${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(text)?.[1] ?? Number.NaN);
  return {
    heapUsedBytes: read('nodejs_heap_size_used_bytes'),
    externalBytes: read('nodejs_external_memory_bytes'),
    eventLoopP99Ms: Math.max(0, read('nodejs_eventloop_lag_p99_seconds') * 1000 - EVENT_LOOP_SAMPLE_MS),
    eventLoopMaxMs: Math.max(0, read('nodejs_eventloop_lag_max_seconds') * 1000 - EVENT_LOOP_SAMPLE_MS),
    memoryReleases: read('idle_memory_releases_total'),
  };
}

/** A throwaway PostgreSQL (the testkit's, as the `postgres` user), every process of it moved to `core`; null when not installed. */
export async function startPostgresPinned({ core }) {
  const testkit = await import('@gw/testkit');
  if (!testkit.havePostgres()) return null;
  const pg = await testkit.startPostgres();
  pinProcessTree(pg.pid, core);
  return { url: await pg.createDatabase('gw_bench'), pid: pg.pid, stop: () => pg.stop() };
}
