// Two builds of the gateway side by side, in alternating rounds on the same core:
// `node bench/ab.mjs <other dist/main.js> [seconds] [rounds] [--stream | --50ms] [--prod [--redis-killed]]`.
// A is the other build, B the working tree's; prints throughput and CPU per unit of work for each round (all threads, and the
// event loop and database thread apart).
// AB_STREAM_MODEL: the upstream profile the streams use (bench/upstream/profiles.mjs; fixed-0ms sends its 20 chunks at once).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { runHttpLoad } from './lib/http-load.mjs';
import { packageVersion } from './lib/machine.mjs';
import { killChildrenOnExit, pinSelf, threadCpuSeconds } from './lib/processes.mjs';
import { GATEWAY_MAIN, startGateway, startPostgresPinned, startRedis, startUpstream } from './lib/services.mjs';
import { runStreamLoad } from './lib/stream-driver.mjs';
import { gatewayModelId } from './upstream/profiles.mjs';

killChildrenOnExit();
pinSelf(1);
const [otherMain, secsArg, roundsArg] = process.argv.slice(2).filter((a) => !a.startsWith('--'));
const secs = Number(secsArg ?? 4);
let rounds = Number(roundsArg ?? 3);
const prod = process.argv.includes('--prod');
// A checkout of another build must resolve the gateway's own undici (packages/server/node_modules), not the
// older one other packages hoist to the root: undici 7 delays each request on a reused connection by a 1 ms timer.
const bMain = process.env.AB_B_MAIN ? resolve(process.env.AB_B_MAIN) : GATEWAY_MAIN;
const undici = { a: packageVersion('undici', resolve(otherMain)), b: packageVersion('undici', bMain) };
if (undici.a !== undici.b) {
  console.error(`A resolves undici ${undici.a}, B ${undici.b}: link A's packages/server/node_modules`);
  process.exit(2);
}
const dir = mkdtempSync(join(tmpdir(), 'ab-'));
const upstream = await startUpstream({ core: 1, dir });
const backends = {};
let pg;
let redis;
if (prod) {
  pg = await startPostgresPinned({ core: 1 });
  redis = await startRedis({ core: 1, dir });
  Object.assign(backends, { redisUrl: redis.url, databaseUrl: pg.url });
}
// AB_A_ENV: the environment `npm start` adds, replaced for A (JSON), to compare settings rather than builds.
const aEnv = process.env.AB_A_ENV ? { processEnv: JSON.parse(process.env.AB_A_ENV) } : {};
if (process.env.AB_A_FLAGS) aEnv.nodeFlags = process.env.AB_A_FLAGS.split(' ');
// AB_A_NODE, AB_B_NODE: another Node.js binary for A or B, to compare runtimes.
if (process.env.AB_A_NODE) aEnv.nodeBinary = resolve(process.env.AB_A_NODE);
const a = await startGateway({ core: 0, dir, name: 'a', upstreamUrl: upstream.url, mainFile: resolve(otherMain), ...aEnv, ...backends });
// AB_A_FLAGS, AB_B_FLAGS: extra node flags for A or B (space-separated), to compare V8 settings.
const bFlags = process.env.AB_B_FLAGS ? { nodeFlags: process.env.AB_B_FLAGS.split(' ') } : {};
if (process.env.AB_B_NODE) bFlags.nodeBinary = resolve(process.env.AB_B_NODE);
const b = await startGateway({
  ...bFlags,
  core: 0,
  dir,
  name: 'b',
  upstreamUrl: upstream.url,
  mainFile: bMain,
  ...backends,
});

// AB_RENICE_V8=A:15 or B:15: lowers the priority of that gateway's V8 helper threads (GC, compilers).
if (process.env.AB_RENICE_V8) {
  const [which, nice] = process.env.AB_RENICE_V8.split(':');
  const { readdirSync, readFileSync } = await import('node:fs');
  const { setPriority } = await import('node:os');
  const pid = (which === 'A' ? a : b).pid;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    const name = readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim();
    if (name.startsWith('V8Worker')) setPriority(Number(tid), Number(nice));
  }
}
const request = (gateway, model, stream) => {
  const body = { model: gateway ? gatewayModelId(model) : model, messages: [{ role: 'user', content: 'Say something short about foxes.' }], max_tokens: 64 };
  if (stream) Object.assign(body, { stream: true, stream_options: { include_usage: true } });
  return {
    url: `${gateway ? gateway.url : upstream.url}/v1/chat/completions`,
    headers: { 'content-type': 'application/json', authorization: `Bearer ${gateway ? gateway.key : 'bench-upstream-key'}` },
    body: JSON.stringify(body),
  };
};
const pct = (xs, p) => [...xs].sort((x, y) => x - y)[Math.floor(p * (xs.length - 1))];
const total = (threads) => Object.values(threads).reduce((s, v) => s + v, 0);
const cpu = (g) => total(threadCpuSeconds(g.pid));
// The split by thread (event loop, database thread): a change to one thread shows there even when the machine's
// speed moves the totals more than the change does.
const splitPerUnit = (t0, t1, units) => `loop ${(((t1.main - t0.main) * 1e6) / units).toFixed(0)} db ${(((t1.worker - t0.worker) * 1e6) / units).toFixed(0)}`;

const stream = process.argv.includes('--stream');
const upstreamModel = process.argv.includes('--50ms') ? 'fixed-50ms' : 'fixed-0ms';
const load = (gateway) =>
  stream
    ? runStreamLoad({
        ...request(gateway, process.env.AB_STREAM_MODEL ?? 'stream-50ms-20x10ms', true),
        concurrency: process.argv.includes('--together') ? 25 : 50,
        durationS: secs,
      })
    : runHttpLoad({ ...request(gateway, upstreamModel, false), connections: process.argv.includes('--together') ? 25 : 50, durationS: secs });
// --redis-killed (with --prod): Redis gone under both gateways, which fail open (the bench's last scenario).
const redisKilled = prod && process.argv.includes('--redis-killed');
if (redisKilled) await redis.kill();
for (const g of [a, b]) await load(g);
// --together: both builds take load at the same time, sharing the core, so a change in the machine's speed
// (frequent here) touches both alike; CPU per unit is then the fairest comparison.
if (process.argv.includes('--together')) {
  const ratios = [];
  for (let i = 0; i < rounds; i++) {
    const c0 = { A: cpu(a), B: cpu(b) };
    const [ra, rb] = await Promise.all([load(a), load(b)]);
    const perA = ((cpu(a) - c0.A) * 1e6) / ra.ok;
    const perB = ((cpu(b) - c0.B) * 1e6) / rb.ok;
    ratios.push(perB / perA);
    const rate = (r) => (stream ? `${r.streamsPerS.toFixed(0)}/s` : `${r.rps.toFixed(0)} req/s`);
    console.log(`round ${i + 1}: A ${rate(ra)} cpu ${perA.toFixed(0)}us | B ${rate(rb)} cpu ${perB.toFixed(0)}us | B/A cpu ${(perB / perA).toFixed(3)}`);
  }
  ratios.sort((x, y) => x - y);
  console.log(`B/A CPU per unit: median ${ratios[Math.floor(ratios.length / 2)].toFixed(3)}, range ${ratios[0].toFixed(3)}-${ratios.at(-1).toFixed(3)}`);
  rounds = 0;
}
// The order alternates (AB, BA, …): whichever runs second in a round tends to find the machine a little warmer.
const ratios = [];
for (let i = 0; i < rounds; i++) {
  const direct = await load(null);
  const order =
    i % 2 === 0
      ? [
          ['A', a],
          ['B', b],
        ]
      : [
          ['B', b],
          ['A', a],
        ];
  const line = {};
  const cpuOf = {};
  for (const [name, g] of order) {
    const t0 = threadCpuSeconds(g.pid);
    const r = await load(g);
    const t1 = threadCpuSeconds(g.pid);
    const perUnit = ((total(t1) - total(t0)) * 1e6) / r.ok;
    const split = splitPerUnit(t0, t1, r.ok);
    cpuOf[name] = perUnit;
    line[name] = stream
      ? `${name} ${r.streamsPerS.toFixed(0)}/s ttft+ p50 ${(pct(r.ttft, 0.5) - pct(direct.ttft, 0.5)).toFixed(1)} p99 ${(pct(r.ttft, 0.99) - pct(direct.ttft, 0.99)).toFixed(1)} cpu ${perUnit.toFixed(0)}us (${split})`
      : `${name} ${r.rps.toFixed(0)} req/s ratio ${(r.rps / direct.rps).toFixed(3)} added p50 ${(pct(r.latencies, 0.5) - pct(direct.latencies, 0.5)).toFixed(2)} p99 ${(pct(r.latencies, 0.99) - pct(direct.latencies, 0.99)).toFixed(2)} cpu ${perUnit.toFixed(0)}us (${split})`;
  }
  ratios.push(cpuOf.B / cpuOf.A);
  console.log(`round ${i + 1}: ${line.A} | ${line.B} | B/A cpu ${(cpuOf.B / cpuOf.A).toFixed(3)}`);
}
if (ratios.length > 0) {
  ratios.sort((x, y) => x - y);
  console.log(`B/A CPU per unit: median ${ratios[Math.floor(ratios.length / 2)].toFixed(3)}, range ${ratios[0].toFixed(3)}-${ratios.at(-1).toFixed(3)}`);
}
await a.stop();
await b.stop();
await upstream.stop();
await pg?.stop();
if (!redisKilled) await redis?.kill();
rmSync(dir, { recursive: true, force: true });
