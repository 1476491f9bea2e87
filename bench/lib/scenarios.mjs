import { gatewayModelId } from '../upstream/profiles.mjs';
import { runHttpLoad } from './http-load.mjs';
import { checkMergedWithinRounds, mergeSamples, sum, summarise } from './stats.mjs';
import { runStreamBurst, runStreamLoad } from './stream-driver.mjs';

const SIDES = ['direct', 'gateway'];

/** Where each side sends its requests: straight to the upstream, or through the gateway with the bench key. */
function endpoint(side, { upstream, gateway, upstreamModel, stream }) {
  const direct = side === 'direct';
  const model = direct ? upstreamModel : gatewayModelId(upstreamModel);
  const body = { model, messages: [{ role: 'user', content: 'Say something short about foxes.' }], max_tokens: 64 };
  if (stream) Object.assign(body, { stream: true, stream_options: { include_usage: true } });
  return {
    url: `${direct ? upstream.url : gateway.url}/v1/chat/completions`,
    headers: { 'content-type': 'application/json', authorization: `Bearer ${direct ? 'bench-upstream-key' : gateway.key}` },
    body: JSON.stringify(body),
  };
}

/**
 * Alternates the sides round by round (D G, G D, D G, …) so that drift over
 * the run hits both alike. Each gateway round also gets the gateway's
 * event-loop stalls during it (from /metrics, whose histogram each scrape resets).
 */
async function interleave({ rounds, gateway, monitor }, run) {
  const out = { direct: [], gateway: [] };
  for (let i = 0; i < rounds; i++) {
    for (const side of i % 2 === 0 ? SIDES : [...SIDES].reverse()) {
      await monitor.waitForQuiet();
      const started = performance.now();
      if (side === 'direct') {
        out.direct.push({ ...(await run(side)), otherCores: monitor.meanSince(started) });
        continue;
      }
      await gateway.scrape();
      const cpuBefore = gateway.threadCpu();
      const result = await run(side);
      const cpu = cpuSince(cpuBefore, gateway.threadCpu());
      const { eventLoopP99Ms, eventLoopMaxMs } = await gateway.scrape();
      out.gateway.push({ ...result, cpu, otherCores: monitor.meanSince(started), eventLoop: { p99Ms: eventLoopP99Ms, maxMs: eventLoopMaxMs } });
    }
  }
  return out;
}

function cpuSince(before, after) {
  return Object.fromEntries(Object.keys(after).map((k) => [k, after[k] - (before[k] ?? 0)]));
}

/** The gateway's CPU per completed request or stream, by kind of thread, in µs (gateway only). */
function cpuPerUnit(rounds) {
  if (!rounds[0]?.cpu) return undefined;
  const units = sum(rounds.map((r) => r.ok));
  const out = {};
  for (const k of Object.keys(rounds[0].cpu)) out[k] = (sum(rounds.map((r) => r.cpu[k])) * 1e6) / units;
  out.total = sum(Object.values(out));
  return out;
}

/** The worst event-loop stall over a side's rounds (gateway only). */
function eventLoop(rounds) {
  if (!rounds[0]?.eventLoop) return undefined;
  return { p99Ms: Math.max(...rounds.map((r) => r.eventLoop.p99Ms)), maxMs: Math.max(...rounds.map((r) => r.eventLoop.maxMs)) };
}

function httpSide(rounds, label) {
  const side = {
    ok: sum(rounds.map((r) => r.ok)),
    failed: sum(rounds.map((r) => r.failed)),
    rps: sum(rounds.map((r) => r.ok)) / sum(rounds.map((r) => r.elapsedS)),
    latency: summarise(mergeSamples(rounds, 'latencies')),
    eventLoop: eventLoop(rounds),
    cpuUs: cpuPerUnit(rounds),
    failures: mergeCounts(rounds.map((r) => r.failures)),
    otherCores: Math.max(...rounds.map((r) => r.otherCores)),
    // Each connection's first response, left out above (http-load.mjs): kept here to be seen.
    firstResponse: summarise(mergeSamples(rounds, 'firstLatencies')),
    perRound: rounds.map((r) => ({ rps: r.rps, otherCores: r.otherCores, ...pick(summarise(r.latencies)) })),
  };
  side.latency = checkMergedWithinRounds(`${label} latency`, side.latency, side.perRound, () => summarise(mergeSamples(rounds, 'latencies')));
  return side;
}

function streamSide(rounds, label) {
  const side = {
    ok: sum(rounds.map((r) => r.ok)),
    failed: sum(rounds.map((r) => r.failed)),
    failures: mergeCounts(rounds.map((r) => r.failures)),
    streamsPerS: sum(rounds.map((r) => r.ok)) / sum(rounds.map((r) => r.elapsedS)),
    ttfb: summarise(mergeSamples(rounds, 'ttfb')),
    ttft: summarise(mergeSamples(rounds, 'ttft')),
    total: summarise(mergeSamples(rounds, 'total')),
    eventLoop: eventLoop(rounds),
    cpuUs: cpuPerUnit(rounds),
    otherCores: Math.max(...rounds.map((r) => r.otherCores)),
    firstTtft: summarise(mergeSamples(rounds, 'firstTtft')),
    perRound: rounds.map((r) => ({ streamsPerS: r.streamsPerS, otherCores: r.otherCores, ttft: pick(summarise(r.ttft)) })),
  };
  side.ttft = checkMergedWithinRounds(
    `${label} TTFT`,
    side.ttft,
    side.perRound.map((r) => r.ttft),
    () => summarise(mergeSamples(rounds, 'ttft')),
  );
  return side;
}

/** Adds up per-round counts by reason ({ 'status 500': 2 } …). */
function mergeCounts(counts) {
  const out = {};
  for (const c of counts) for (const [k, n] of Object.entries(c ?? {})) out[k] = (out[k] ?? 0) + n;
  return out;
}

function pick({ p50, p99 }) {
  return { p50, p99 };
}

/**
 * Warm-up windows last this long; the gateway is warm once V8's helper threads use under {@link STEADY_V8_SHARE}
 * of its CPU in one. They also mark and sweep concurrently, so under saturating load they may stay above it
 * once compiling is done: `warmupMaxS` bounds the wait.
 */
const WARMUP_WINDOW_S = 2;
const STEADY_V8_SHARE = 0.03;

/**
 * Loads the gateway for `warmupS`, then in windows of {@link WARMUP_WINDOW_S}
 * until it is at steady state or `warmupMaxS` have passed. A freshly started
 * gateway compiles its request path for its first 5-10 s under load (V8's
 * helper threads, on the same core, then take a third of its CPU), and a
 * long-running server is measured, not its start-up. Returns the seconds it took.
 */
async function warmGateway(gateway, load, warmupS, warmupMaxS) {
  await load(warmupS);
  let warmedS = warmupS;
  while (warmedS < warmupMaxS) {
    const before = gateway.threadCpu();
    await load(WARMUP_WINDOW_S);
    warmedS += WARMUP_WINDOW_S;
    const used = cpuSince(before, gateway.threadCpu());
    const total = sum(Object.values(used));
    if (total > 0 && used.v8 / total < STEADY_V8_SHARE) break;
  }
  return warmedS;
}

/**
 * Warms both sides up, then loads them in interleaved rounds; `summary` turns each side's rounds into
 * its figures, `what` names the scenario in the result (and in a failed consistency check).
 * `directWarm(kind, warmupS)`: the direct side's warm-up in seconds (run.mjs shortens it for
 * non-streamed load once the upstream and the load driver have served it earlier in the run).
 */
async function compareSides({ gateway, monitor, rounds, roundS, warmupS, warmupMaxS = warmupS, directWarm }, { kind, what, label, load, summary }) {
  const directWarmupS = directWarm ? directWarm(kind, warmupS) : warmupS;
  await load('direct', directWarmupS);
  const warmedS = await warmGateway(gateway, (s) => load('gateway', s), warmupS, warmupMaxS);
  const raw = await interleave({ rounds, gateway, monitor }, (side) => load(side, roundS));
  return {
    kind,
    ...what,
    rounds,
    roundS,
    warmupS: { direct: directWarmupS, gateway: warmedS },
    direct: summary(raw.direct, `${label} direct`),
    gateway: summary(raw.gateway, `${label} gateway`),
  };
}

/** Non-streamed chat completions at fixed concurrency, direct against gateway, interleaved. */
export function compareHttp(options) {
  const { upstream, gateway, upstreamModel, connections } = options;
  return compareSides(options, {
    kind: 'http',
    what: { upstreamModel, connections },
    label: `${upstreamModel}, ${connections} conns`,
    load: (side, durationS) => runHttpLoad({ ...endpoint(side, { upstream, gateway, upstreamModel, stream: false }), connections, durationS }),
    summary: httpSide,
  });
}

/** Streamed chat completions, `concurrency` at all times, direct against gateway, interleaved. */
export function compareStreams(options) {
  const { upstream, gateway, upstreamModel, concurrency } = options;
  return compareSides(options, {
    kind: 'stream',
    what: { upstreamModel, concurrency },
    label: `${upstreamModel}, ${concurrency} streams`,
    load: (side, durationS) => runStreamLoad({ ...endpoint(side, { upstream, gateway, upstreamModel, stream: true }), concurrency, durationS }),
    summary: streamSide,
  });
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * `count` streams opened at once, direct then through the gateway, with the
 * gateway's resident memory before, at peak (sampled every 50 ms) and
 * `settleMs` after the last stream ended, beside what it had at its start.
 * `withDirect` false: the gateway's side only (a floor proxy, whose memory is all that is compared).
 */
export async function burstOfStreams({ upstream, gateway, monitor, upstreamModel, count, settleMs, withDirect = true }) {
  const burst = (side, onSample) => runStreamBurst({ ...endpoint(side, { upstream, gateway, upstreamModel, stream: true }), count, onSample });
  let direct = null;
  if (withDirect) {
    await monitor.waitForQuiet();
    direct = await burst('direct');
    await sleep(1000);
  }
  await monitor.waitForQuiet();
  const before = await gateway.scrape();
  const rssBefore = gateway.rss();
  const rssHighestBefore = gateway.peakRss();
  let rssPeak = rssBefore;
  const viaGateway = await burst('gateway', () => {
    rssPeak = Math.max(rssPeak, gateway.rss());
  });
  rssPeak = Math.max(rssPeak, gateway.rss());
  await sleep(settleMs);
  const rssAfter = gateway.rss();
  const after = await gateway.scrape();
  const side = (r) => ({
    ok: r.ok,
    failed: r.failed,
    failures: r.failures,
    peakOpen: r.peakOpen,
    elapsedS: r.elapsedS,
    ttft: summarise(r.ttft),
    total: summarise(r.total),
  });
  const memory = {
    rssAtStart: gateway.rssAtStart,
    rssBefore,
    rssHighestBefore,
    rssPeak,
    rssAfter,
    heapUsedBefore: before.heapUsedBytes,
    heapUsedAfter: after.heapUsedBytes,
    externalBefore: before.externalBytes,
  };
  return { kind: 'burst', upstreamModel, count, settleMs, direct: direct && side(direct), gateway: side(viaGateway), memory };
}

/**
 * Holds (SIGSTOP) a gateway that has served its last request, for {@link readOnceIdle}: held, the
 * hand-back's pause cannot land on the core while something else is measured there, and its clock
 * goes on, so once let go on it counts all of that time as idle, as it would have.
 */
export async function holdIdle(gateway) {
  const { memoryReleases } = await gateway.scrape();
  gateway.hold();
  return { since: performance.now(), releasesBefore: memoryReleases };
}

/**
 * A burst's last reading (into `memory`), of a gateway held by {@link holdIdle}: once it has been idle
 * for `idleS`, it is let go on and its idle check (once a second, and at once when overdue) finds it
 * idle. It hands its memory back (counted in /metrics) if it grew enough since the last time (app.ts);
 * its RSS is read `settleS` after that, or after `waitS` if it did not.
 */
export async function readOnceIdle(gateway, memory, held, { idleS, waitS, settleS }) {
  const { since, releasesBefore } = held;
  await sleep(Math.max(0, since + idleS * 1000 - performance.now()));
  gateway.release();
  const deadline = performance.now() + waitS * 1000;
  let handedBack = false;
  while (!handedBack && performance.now() < deadline) {
    await sleep(200);
    handedBack = (await gateway.scrape()).memoryReleases > releasesBefore;
  }
  if (handedBack) await sleep(settleS * 1000);
  Object.assign(memory, {
    handedBack,
    rssOnceIdle: gateway.rss(),
    heapUsedOnceIdle: (await gateway.scrape()).heapUsedBytes,
    onceIdleAfterS: (performance.now() - since) / 1000,
  });
}
