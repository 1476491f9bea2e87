// CPU profiles of the gateway under load: `npm run build && node bench/profile.mjs [seconds] [--prod]`.
// One gateway process per load (0 ms non-streaming, then streaming), each started with --cpu-prof
// and stopped with SIGTERM so that V8 writes its profile; summaries go to stdout and bench/results/.
// Default: the embedded setup (PGlite, in-process limiter); --prod: PostgreSQL + Redis; PROFILE_ONLY=stream (or http-0ms): one load only;
// PROFILE_STREAM_MODEL: the upstream profile the streams use (bench/upstream/profiles.mjs); KEEP=1 keeps the run's directory (the gateway's log) in the system's temporary directory.
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { renderProfile, summariseProfile } from './cpuprofile-top.mjs';
import { runHttpLoad } from './lib/http-load.mjs';
import { killChildrenOnExit, pinSelf, removeIfInterrupted } from './lib/processes.mjs';
import { startGateway, startPostgresPinned, startRedis, startUpstream } from './lib/services.mjs';
import { runStreamLoad } from './lib/stream-driver.mjs';
import { gatewayModelId } from './upstream/profiles.mjs';

const ROOT = new URL('../', import.meta.url).pathname;
const seconds = Number(process.argv.find((a) => /^\d+$/.test(a)) ?? 10);
const prod = process.argv.includes('--prod');

const LOADS = {
  'http-0ms': (gateway, durationS) =>
    runHttpLoad({ ...request(gateway, 'fixed-0ms', false), connections: 50, durationS }).then(
      (r) => `${r.rps.toFixed(0)} req/s, ${r.failed} failed ${JSON.stringify(r.failures)}`,
    ),
  stream: (gateway, durationS) =>
    runStreamLoad({ ...request(gateway, process.env.PROFILE_STREAM_MODEL ?? 'stream-50ms-20x10ms', true), concurrency: 50, durationS }).then(
      (r) => `${r.streamsPerS.toFixed(0)} streams/s, ${r.failed} failed`,
    ),
};

function request(gateway, upstreamModel, stream) {
  const body = { model: gatewayModelId(upstreamModel), messages: [{ role: 'user', content: 'Say something short about foxes.' }], max_tokens: 64 };
  if (stream) Object.assign(body, { stream: true, stream_options: { include_usage: true } });
  return {
    url: `${gateway.url}/v1/chat/completions`,
    headers: { 'content-type': 'application/json', authorization: `Bearer ${gateway.key}` },
    body: JSON.stringify(body),
  };
}

async function profileOne(name, dir, upstream, backends) {
  const profDir = join(dir, `prof-${name}`);
  const spawnedAt = performance.now();
  const gateway = await startGateway({
    core: 0,
    dir,
    name: `gateway-${name}`,
    upstreamUrl: upstream.url,
    ...backends,
    nodeFlags: ['--cpu-prof', `--cpu-prof-dir=${profDir}`],
  });
  const loadWindow = {};
  try {
    await LOADS[name](gateway, 2);
    loadWindow.fromMs = performance.now() - spawnedAt;
    const outcome = await LOADS[name](gateway, seconds);
    loadWindow.toMs = performance.now() - spawnedAt;
    process.stderr.write(`[profile] ${name}: ${outcome}\n`);
  } finally {
    await gateway.stop();
  }
  const file = readdirSync(profDir).find((f) => f.endsWith('.cpuprofile'));
  if (!file) throw new Error(`no .cpuprofile written in ${profDir}`);
  const text = renderProfile(summariseProfile(JSON.parse(readFileSync(join(profDir, file), 'utf8')), { count: 20, ...loadWindow }));
  const base = join(ROOT, `bench/results/profile-${name}${prod ? '-prod' : ''}`);
  mkdirSync(join(ROOT, 'bench/results'), { recursive: true });
  writeFileSync(`${base}.txt`, `${text}\n`);
  // The whole profile, start-up included, for Chrome DevTools (Performance > Load profile) or speedscope.
  copyFileSync(join(profDir, file), `${base}.cpuprofile`);
  return `== gateway CPU profile (${prod ? 'PostgreSQL + Redis' : 'embedded'}) under ${name} load: the ${seconds} s after 2 s of warm-up (start-up and shutdown left out) ==\n${text}`;
}

async function main() {
  killChildrenOnExit();
  pinSelf(1);
  const dir = mkdtempSync(join(tmpdir(), 'gw-profile-'));
  removeIfInterrupted(dir);
  const upstream = await startUpstream({ core: 1, dir });
  const postgres = prod ? await startPostgresPinned({ core: 1 }) : null;
  const redis = prod ? await startRedis({ core: 1, dir }) : null;
  const backends = { redisUrl: redis?.url ?? null, databaseUrl: postgres?.url ?? null };
  let failed = false;
  try {
    for (const name of Object.keys(LOADS).filter((n) => !process.env.PROFILE_ONLY || n === process.env.PROFILE_ONLY))
      process.stdout.write(`${await profileOne(name, dir, upstream, backends)}\n\n`);
    return 0;
  } catch (err) {
    process.stderr.write(`[profile] failed: ${err instanceof Error ? err.stack : err}\n  logs: ${dir}\n`);
    failed = true;
    return 1;
  } finally {
    await upstream.stop();
    await redis?.kill();
    await postgres?.stop();
    if (!failed && !process.env.KEEP) rmSync(dir, { recursive: true, force: true });
  }
}

process.exitCode = await main();
