// CPU profiles of the gateway under load: `npm run build && node bench/profile.mjs [seconds] [--prod]`.
// One gateway process per load (0 ms non-streaming, then streaming), each started with --cpu-prof
// and stopped with SIGTERM so that V8 writes its profile; summaries go to stdout and bench/results/.
// Default: the embedded setup (PGlite, in-process limiter); --prod: PostgreSQL + Redis; PROFILE_ONLY=stream (or http-0ms): one load only;
// PROFILE_REDIS_KILLED=1 with --prod: Redis killed once the gateway is up, as in the bench's last scenario (one load only);
// PROFILE_STREAM_MODEL: the upstream profile the streams use (bench/upstream/profiles.mjs); KEEP=1 keeps the run's directory (the gateway's log) in the system's temporary directory.
import { copyFileSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { renderProfile, summariseProfile } from './cpuprofile-top.mjs';
import { PROFILE_LOADS, runProfiles } from './lib/profile-runs.mjs';

const ROOT = new URL('../', import.meta.url).pathname;
const seconds = Number(process.argv.find((a) => /^\d+$/.test(a)) ?? 10);
const prod = process.argv.includes('--prod');

async function profileOne(name, { dir, startGateway }) {
  const profDir = join(dir, `prof-${name}`);
  const spawnedAt = performance.now();
  const gateway = await startGateway(['--cpu-prof', `--cpu-prof-dir=${profDir}`]);
  const loadWindow = {};
  try {
    await PROFILE_LOADS[name](gateway, 2);
    loadWindow.fromMs = performance.now() - spawnedAt;
    const outcome = (await PROFILE_LOADS[name](gateway, seconds)).text;
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

process.exitCode = await runProfiles({ tool: 'profile', prod, names: Object.keys(PROFILE_LOADS) }, profileOne);
