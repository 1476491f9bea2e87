import { added, addedTtft, evaluateTargets } from './targets.mjs';

const ms = (v) => (v === undefined || v === null || Number.isNaN(v) ? 'n/a' : v.toFixed(2));
const signed = (v) => (v === undefined || Number.isNaN(v) ? 'n/a' : `${v >= 0 ? '+' : ''}${v.toFixed(2)}`);
const int = (v) => (v === undefined || Number.isNaN(v) ? 'n/a' : Math.round(v).toLocaleString('en-GB'));
const ratio = (a, b) => (b ? (a / b).toFixed(2) : 'n/a');
const mb = (bytes) => (bytes / 1024 / 1024).toFixed(1);

function table(head, rows) {
  if (rows.length === 0) return '';
  return [`| ${head.join(' | ')} |`, `|${head.map((_h, i) => (i === 0 ? '---' : '--:')).join('|')}|`, ...rows.map((r) => `| ${r.join(' | ')} |`)].join('\n');
}

const HTTP_ROWS = [
  ['http0', 'embedded', '0 ms upstream'],
  ['http50', 'embedded', '50 ms upstream'],
  ['http0c1', 'embedded', '0 ms upstream, no queueing'],
  ['prodHttp0', 'prod', '0 ms upstream'],
  ['prodHttp50', 'prod', '50 ms upstream'],
  ['redisDownHttp50', 'prod', '50 ms upstream, Redis killed (fail-open)'],
];
const STREAM_ROWS = [
  ['stream', 'embedded'],
  ['prodStream', 'prod'],
];
const BURST_ROWS = [
  ['burst', 'embedded'],
  ['prodBurst', 'prod'],
];

const cores = (d, g) => Math.max(d.otherCores ?? 0, g.otherCores ?? 0).toFixed(2);
const failures = (d, g) => {
  const why = Object.entries(g.failures ?? {}).map(([reason, n]) => `${n}× ${reason}`);
  return `${d.failed} / ${g.failed}${why.length ? ` (${why.join(', ')})` : ''}`;
};
const stall = (side) => (side.eventLoop ? `${ms(side.eventLoop.p99Ms)} / ${ms(side.eventLoop.maxMs)}` : 'n/a');

function httpTable(s, setups) {
  const rows = HTTP_ROWS.filter(([id]) => s[id]).map(([id, setup, what]) => {
    const { direct: d, gateway: g, connections } = s[id];
    const cells = [`${what}, ${connections} conns [${setups[setup]}]`, int(d.rps), int(g.rps), ratio(g.rps, d.rps)];
    for (const p of ['p50', 'p99']) cells.push(ms(d.latency[p]), ms(g.latency[p]), signed(g.latency[p] - d.latency[p]));
    return [...cells, stall(g), cores(d, g), failures(d, g)];
  });
  const head = [
    'scenario [gateway setup]',
    'direct req/s',
    'gateway req/s',
    'ratio',
    'direct p50',
    'gateway p50',
    'added p50',
    'direct p99',
    'gateway p99',
    'added p99',
  ];
  return table([...head, 'gateway loop stall p99 / max', 'other CPU', 'failed d / g'], rows);
}

function ttftCells(d, g) {
  const cells = [];
  for (const p of ['p50', 'p99']) cells.push(ms(d.ttft[p]), ms(g.ttft[p]), signed(g.ttft[p] - d.ttft[p]));
  return cells;
}

function streamTable(s, setups) {
  const rows = [];
  for (const [id, setup] of STREAM_ROWS.filter(([key]) => s[key])) {
    const { direct: d, gateway: g, concurrency } = s[id];
    const what = `${concurrency} at a time, 50 ms to first token, 20 chunks 10 ms apart [${setups[setup]}]`;
    rows.push([
      what,
      ratio(g.streamsPerS, d.streamsPerS),
      `${ms(d.ttfb.p50)} / ${ms(g.ttfb.p50)}`,
      ...ttftCells(d, g),
      `${ms(d.total.p50)} / ${ms(g.total.p50)}`,
      stall(g),
      cores(d, g),
      failures(d, g),
    ]);
  }
  for (const [id, setup] of BURST_ROWS.filter(([key]) => s[key])) {
    const { direct: d, gateway: g, count } = s[id];
    const what = `${count.toLocaleString('en-GB')} requested at once, 20 chunks 100 ms apart [${setups[setup]}]`;
    rows.push([what, 'n/a', 'n/a', ...ttftCells(d, g), `${ms(d.total.p50)} / ${ms(g.total.p50)}`, 'n/a', 'n/a', failures(d, g)]);
  }
  const head = ['scenario [gateway setup]', 'streams/s ratio', 'first byte p50 d / g', 'direct TTFT p50', 'gateway TTFT p50', 'added p50'];
  return table(
    [...head, 'direct TTFT p99', 'gateway TTFT p99', 'added p99', 'total p50 d / g', 'gateway loop stall p99 / max', 'other CPU', 'failed d / g'],
    rows,
  );
}

/** The gateways' bursts, and the node:http floor's (its side only: no direct burst of its own). */
const MEMORY_ROWS = [...BURST_ROWS, ['floorNodeHttpBurst', 'floor']];

function memoryTable(s, setups) {
  const names = { ...setups, floor: 'node:http floor, nothing else' };
  const rows = MEMORY_ROWS.filter(([id]) => s[id]).map(([id, setup]) => {
    const { memory: m, direct: d, gateway: g, count, settleMs } = s[id];
    // A floor has no /metrics; in latest.json a missing figure reads null.
    const heap = !Number.isFinite(m.heapUsedBefore) ? '' : ` (heap ${mb(m.heapUsedBefore)}, external ${mb(m.externalBefore)})`;
    return [
      `${count.toLocaleString('en-GB')} streams [${names[setup]}]`,
      `${d ? d.ok : '–'} / ${g.ok}`,
      `${d ? d.peakOpen : '–'} / ${g.peakOpen}`,
      m.rssAtStart === undefined ? 'n/a' : mb(m.rssAtStart),
      `${mb(m.rssBefore)}${heap}`,
      m.rssHighestBefore === undefined ? 'n/a' : mb(m.rssHighestBefore),
      mb(m.rssPeak),
      `${mb(m.rssAfter)} after ${settleMs / 1000} s`,
      `${signed(((m.rssAfter - m.rssBefore) / m.rssBefore) * 100)} %`,
      m.rssOnceIdle === undefined ? '–' : `${mb(m.rssOnceIdle)} after ${m.onceIdleAfterS.toFixed(0)} s (${m.handedBack ? 'handed back' : 'no hand-back'})`,
      m.rssOnceIdle === undefined ? '–' : `${signed(((m.rssOnceIdle - m.rssBefore) / m.rssBefore) * 100)} %`,
      `${d ? ms(d.total.max) : '–'} / ${ms(g.total.max)}`,
    ];
  });
  const head = [
    'scenario [process]',
    'completed d / g',
    'most open at once d / g',
    'RSS at its start, MB',
    'RSS before, MB',
    'highest RSS before, MB',
    'peak RSS, MB',
  ];
  return table([...head, 'RSS after, MB', 'after vs before', 'RSS once idle, MB', 'once idle vs before', 'slowest stream ms d / g'], rows);
}

/** Where the gateway's one core goes, per request or stream: the event loop, V8's helper threads, the embedded database's thread. */
function cpuTable(s, setups) {
  const us = (v) => (v === undefined ? 'n/a' : Math.round(v).toLocaleString('en-GB'));
  const rows = [];
  for (const [id, setup, what] of HTTP_ROWS) {
    const c = s[id]?.gateway.cpuUs;
    if (c) rows.push([`${what}, ${s[id].connections} conns, per request [${setups[setup]}]`, us(c.main), us(c.v8), us(c.worker), us(c.other), us(c.total)]);
  }
  for (const [id, setup] of STREAM_ROWS) {
    const c = s[id]?.gateway.cpuUs;
    if (c)
      rows.push([
        `${s[id].concurrency} streams at a time, per stream of 22 events [${setups[setup]}]`,
        us(c.main),
        us(c.v8),
        us(c.worker),
        us(c.other),
        us(c.total),
      ]);
  }
  return table(['scenario [gateway setup]', 'event loop', 'V8 helpers (GC, compilers)', 'database thread', 'other threads', 'total'], rows);
}

const FLOOR_ROWS = [
  ['floorNodeHttp', 'node:http + undici, nothing else'],
  ['floorFastify', 'Fastify + undici, nothing else'],
  ['http0', 'the gateway [embedded]'],
  ['prodHttp0', 'the gateway [PostgreSQL + Redis]'],
];

/** The gateway's 0 ms row beside the smallest proxies of the same call, each against direct in its own rounds. */
function floorTable(s) {
  if (!s.floorNodeHttp) return '';
  const rows = FLOOR_ROWS.filter(([id]) => s[id]).map(([id, what]) => {
    const { direct: d, gateway: g } = s[id];
    return [what, int(d.rps), int(g.rps), ratio(g.rps, d.rps), signed(g.latency.p50 - d.latency.p50), int(g.cpuUs?.total)];
  });
  return table(["proxy on the gateway's core, 0 ms upstream, 50 conns", 'direct req/s', 'proxy req/s', 'ratio', 'added p50', 'CPU µs per request'], rows);
}

const FLOOR_LATENCY_ROWS = [
  ['floorNodeHttpHttp50', 'http50', '50 ms upstream, 50 conns: added latency'],
  ['floorNodeHttpStream', 'stream', '50 streams at a time, 50 ms to first token: added TTFT'],
];

/** The node:http floor on the latency scenarios beside the embedded gateway, each against direct in its own rounds. */
function floorLatencyTable(s) {
  const rows = FLOOR_LATENCY_ROWS.filter(([floorId, gatewayId]) => s[floorId] && s[gatewayId]).map(([floorId, gatewayId, what]) => {
    const f = s[floorId];
    const g = s[gatewayId];
    const add = f.kind === 'stream' ? addedTtft : added;
    return [
      what,
      signed(add(f, 'p50')),
      signed(add(f, 'p99')),
      signed(add(g, 'p50')),
      signed(add(g, 'p99')),
      int(f.gateway.cpuUs?.total),
      int(g.gateway.cpuUs?.total),
    ];
  });
  return table(
    ['scenario', 'floor added p50', 'floor added p99', 'gateway [embedded] added p50', 'gateway added p99', 'floor CPU µs per unit', 'gateway CPU µs per unit'],
    rows,
  );
}

function verdict(t, amount) {
  if (t.noVerdict) return 'no verdict: direct was slower here (a stall on the load side); rerun';
  if (t.met === null) return 'not run';
  return t.met ? 'met' : `**missed** by ${amount(t, t.miss)}`;
}

function targetsTable(s) {
  const amount = (t, v) => `${t.unit === 'req/s' || t.unit === 'streams' ? int(v) : v.toFixed(2)} ${t.unit}`;
  const rows = evaluateTargets(s).map((t) => [
    t.label,
    `${t.bound === 'max' ? '≤' : '≥'} ${t.limit.toLocaleString('en-GB')} ${t.unit}`,
    t.value === null ? 'n/a' : amount(t, t.value),
    verdict(t, amount),
    t.floor === null ? '' : amount(t, t.floor),
  ]);
  return table(['target', 'bound', 'measured', 'verdict', 'node:http floor, same figure'], rows);
}

/** The result tables, as Markdown (also what is printed to stdout). */
export function renderTables(results) {
  const s = results.scenarios;
  const setups = results.setups;
  const other = results.otherCpu;
  return [
    `Other processes on the machine used ${other.meanCores.toFixed(2)} cores on average during the run (busiest second: ${other.maxCores.toFixed(2)}); rounds waited ${other.waitedS.toFixed(0)} s in all for them to quieten. The "other CPU" column is the most they used during a round of that row (0.00: a quiet machine).`,
    '### Non-streaming (latency in ms; added = gateway − direct at the same percentile)',
    httpTable(s, setups),
    '### Streaming (ms from the request; TTFT = first content token)',
    streamTable(s, setups),
    '### Memory of the gateway process (and of the node:http floor under the same burst)',
    memoryTable(s, setups),
    "### Gateway CPU by thread (µs of CPU per request or stream, user + system, from /proc; all of them share the gateway's one core)",
    cpuTable(s, setups),
    '### Floors: the smallest proxy of the same call, on the same core (bench/upstream/floor-proxy.mjs)',
    floorTable(s),
    floorLatencyTable(s),
    ...(results.mode === 'full' ? ['### Targets', targetsTable(s)] : []),
  ]
    .filter((part, i, all) => part !== '' && !(part.startsWith('###') && all[i + 1] === ''))
    .join('\n\n');
}

/** The first responses the percentiles leave out, at 50 ms upstream and in the streams, direct against the embedded gateway. */
function firstWave(s) {
  const parts = [];
  if (s.http50?.direct.firstResponse) parts.push(`at 50 ms upstream p50 ${ms(s.http50.direct.firstResponse.p50)} / ${ms(s.http50.gateway.firstResponse.p50)}`);
  if (s.stream?.direct.firstTtft) parts.push(`TTFT of the streams p50 ${ms(s.stream.direct.firstTtft.p50)} / ${ms(s.stream.gateway.firstTtft.p50)}`);
  const figures = parts.length ? `this run, direct / gateway [embedded]: ${parts.join('; ')}` : 'this run: n/a';
  return `their own figures are in \`bench/results/latest.json\` (\`firstResponse\`, \`firstTtft\`; ${figures})`;
}

/** How long each process's 0 ms scenario warmed the gateway (or floor) up. */
function warmedUp(s) {
  const rows = [
    ['embedded', s.http0],
    ['PostgreSQL + Redis', s.prodHttp0],
    ['node:http floor', s.floorNodeHttp],
    ['Fastify floor', s.floorFastify],
  ].filter(([, sc]) => sc?.warmupS?.gateway !== undefined);
  return rows.length === 0 ? 'n/a' : `this run: ${rows.map(([name, sc]) => `${name} ${sc.warmupS.gateway} s`).join(', ')}`;
}

function method(results) {
  const m = results.machine;
  const p = results.plan;
  return `## Method

- **Machine**: ${m.cpuModel}, ${m.cores} cores, ${m.totalMemGiB} GiB; ${m.os}.
- **Software**: Node ${m.node} (the pinned \`node\` package), fastify ${m.fastify}, undici ${m.undici}, autocannon ${m.autocannon},
  redis-server ${m.redis}; commit ${m.commit}.
- **Started as \`npm start\` starts it**: package.json \`config.nodeFlags\` (\`${m.nodeFlags}\`) ${m.processEnv ? `and the allocator's environment from scripts/malloc-env.mjs (\`${m.processEnv}\`: jemalloc where the system has it)` : 'on the allocator of the LD_PRELOAD already set in the environment (scripts/malloc-env.mjs adds none then)'}${m.oneCoreFlags ? `, and for this run \`${m.oneCoreFlags}\` (\`GW_BENCH_ONE_CORE_FLAGS\`)` : ''}.
- **Pinning** (\`taskset\`): the gateway (\`packages/server/dist/main.js\`, its own process) on core 0; everything else on core 1:
  the bench runner (autocannon and the stream driver; \`taskset -a -p\`), the fake upstream (its own process), redis-server and
  PostgreSQL. Other processes on the machine are watched (/proc) and reported above the tables.
- **Gateway setups**, each a fresh process with a fresh store:
  - *${results.setups.embedded}*: the defaults of one instance: PGlite on its own thread of the gateway's process (store and usage records), in-process
    limiter, budget ledger and stream buffers.
  - *${results.setups.prod ?? 'n/a'}*: the scaled-out setup: \`DATABASE_URL\` (a throwaway PostgreSQL) and \`REDIS_URL\` (sliding
    window as a Lua script, budget ledger, stream buffers, revocation bus). "Redis killed" is redis-server after SIGKILL, same gateway:
    the limiter fails open, and budgets are held by leases in PostgreSQL (one lease call per 64 requests, not one per request).
- **As in production**: API key auth (sha256 lookup, cached), the rate limiter, a budget hold per request (key budget €1e9) settled
  at the end, usage records written in batches, metrics, \`X-Request-Id\` and \`Server-Timing\`. The key has \`rateLimitRpm\`
  1,000,000, so the limiter runs but refuses nothing. \`GW_LOG_LEVEL=warn\`: pino is on, Fastify's per-request \`info\` lines are
  not written; the gateway's stdout goes to a file.
- **Fake upstream** (\`bench/upstream/\`): node:http, OpenAI-compatible; the model name picks the behaviour: a fixed wait before a
  non-streamed answer (pre-serialised JSON), or stream headers at once, the first content chunk after 50 ms, then chunks at a fixed gap,
  the usage chunk and \`[DONE]\`.
- **Load**: autocannon, closed loop at fixed concurrency (50; 1 for the no-queueing row, 2 rounds of 2 s), keep-alive; latencies from its per-response hrtime event (its own
  histogram rounds to whole ms). Streams: a node:http driver timing the first byte (response headers), the first content token
  (TTFT) and \`[DONE]\`. Each round opens its connections anew, and each connection's first response (streams: its first stream)
  is left out of the latency and TTFT percentiles: it carries the connection's setup and the load generator starting its round
  cold, all connections at once, one wave per round, which was the p99 of direct rounds on their own (50 ms upstream: 57-75 ms
  with it, 53-55 without). They count in requests/s and streams/s; ${firstWave(results.scenarios)}.
- **Direct against gateway in the same run, interleaved**: after ${p.warmupS} s of warm-up per side (0 ms: ${p.warmupS * 2} s; the direct
  side ${p.directRewarmS ?? p.warmupS} s for non-streamed load once the upstream and the load driver have served it earlier in the run), rounds
  alternate D G, G D, …: ${p.rounds} rounds of ${p.roundS} s per side on the embedded setup, ${p.prodRounds ?? 'n/a'} of ${p.prodRoundS ?? 'n/a'} s on the other
  (floors: ${p.floorRounds ?? 'n/a'} of ${p.floorRoundS ?? 'n/a'} s; the Fastify floor, which has only the 0 ms row, ${p.fastifyRoundS ?? 'n/a'} s). Percentiles are
  over every sample of all rounds; added = gateway minus direct at the same percentile. The 0 ms scenario is each process's
  first: a fresh gateway compiles its request path for its first 5-10 s under load (V8's helper threads take up to a third of its
  core), so its warm-up goes on in 2 s windows until those threads use under 3% of its CPU in one, at most ${p.warmupMaxS ?? 'n/a'} s (they
  also collect garbage concurrently, and may not fall that low)
  (${warmedUp(results.scenarios)}): capacity is that of a running server, not of one starting. "Loop stall" is the gateway's own event-loop
  delay (prom-client's histogram, 10 ms resolution) over its rounds, from \`/metrics\`. Per-round figures: \`bench/results/latest.json\`.
- **1,000 streams**: requested at once, direct then through the gateway; the gateway's RSS (\`/proc/<pid>/status\` VmRSS) before,
  sampled every 50 ms, and ${p.settleS} s after the last one ended; heap and external memory from \`/metrics\`. "RSS at its start" is
  the same process once it served, before any load: on the embedded store that can fall in the second or two after it opened, while
  V8 compiles PGlite's WebAssembly (docs/decisions.md). "Highest RSS before" is VmHWM read as the burst begins: the most the process
  has held from its start on, that compilation and the earlier scenarios included. "Once idle": the gateway hands the memory a burst leaves behind back to the
  system after 30 s without a request (docs/decisions.md); the bench holds it (SIGSTOP, so that the hand-back's pause does not
  land on the core while the next setups are measured there) from its last request (embedded, the burst's last stream; with
  PostgreSQL + Redis, the Redis-killed scenario that follows its burst) until those setups are done, at least
  ${p.onceIdle?.idleS ?? 'n/a'} s (the table gives how long), lets it go on, waits for the hand-back in \`/metrics\`
  (\`gw_idle_memory_releases_total\`) and reads its RSS ${p.onceIdle?.settleS ?? 'n/a'} s later (${p.onceIdle?.waitS ?? 'n/a'} s after it went on if it did
  not hand back: it does so only once it has grown by 32 MB since its start or last hand-back; after 100 s without a collection, V8's own
  memory reducer runs a memory-reducing one, docs/decisions.md). The target's "after" is that reading. The node:http floor takes the same burst after its own scenarios (its side only; it has no hand-back, so its
  "after" is the reading ${p.settleS} s after).
- **CPU by thread**: user + system time of each of the gateway's threads (\`/proc/<pid>/task/*/stat\`) over its rounds, divided by
  the requests or streams completed in them. The event loop is the main thread; V8's platform workers do parallel and concurrent
  garbage collection and background compilation; the database thread is embedded PGlite's worker thread.

Rerun: \`npm run bench\` (about ${p.expectedMinutes} minutes on a quiet machine, this run ${results.durationS.toFixed(0)} s; rounds wait at most
${p.quietBudgetS} s in all for other processes to quieten; needs \`taskset\`, \`redis-server\` and, for the PostgreSQL setup,
Debian's \`postgresql\`). \`node bench/run.mjs --quick\` is the CI guard (about 30 s). Tools for finding where the cost goes:
\`node bench/profile.mjs\` (CPU profiles under load), \`node bench/alloc-profile.mjs\` (bytes allocated per request or stream by
allocation site, and what 1,000 open streams hold), \`node bench/chunk-cost.mjs\` (CPU per relayed chunk, gateway beside the
node:http floor) and \`node bench/ab.mjs\` (two builds loaded together on the core, CPU per request or stream).
\`GW_BENCH_ONE_CORE_FLAGS\` adds node flags to the gateway's and the floors' for one run (\`--trace-gc\`, say), and
\`GW_BENCH_KEEP_LOGS=1\` keeps every process's log (the gateways' with what those flags print) and names its directory.`;
}

const READING = `## Reading the figures

- **added** latency is the gateway's cost as a client sees it: its own work, one more loopback hop each way, and waiting behind
  other requests on its single core. The "no queueing" row (one connection) is the per-request cost alone.
  A reused upstream connection is checked for bytes nobody asked for (response queue poisoning) in the loop's turn in which
  its previous answer ended, so a request is written as it is dispatched (scripts/patch-undici.mjs); stock undici waits at each
  dispatch for the turn to end, about half of the gateway's added p50 at 50 ms upstream (docs/decisions.md).
- **p99** on one core follows the longest event-loop stalls (garbage collection, a batch of usage records written, a busy moment
  of another process): compare it with the "loop stall" column, the time by which the gateway's 10 ms event-loop timer fired
  late (prom-client's histogram of whole intervals, less the 10 ms). A negative added figure is the direct side's stall (its
  driver and upstream share the other core), not a gateway faster than direct: a target read from one gets no verdict.
- **first byte** through the gateway comes with the first content chunk: the gateway answers only once the upstream has started
  (so that a provider failing before its first byte can still fail over). Direct, headers arrive at once.
- **most open at once** through the gateway is below the count when its one core sets streams up more slowly than they come:
  the first ones end before the last have started, which shows as their time to first token.
- **RSS before** is the process after the earlier scenarios, not a fresh one: it includes the heap that V8 has grown and not
  given back (the gateway hands it back after 30 s without requests, which the scenarios never leave it before a burst:
  "once idle" is after one; docs/decisions.md).
  Embedded, it includes PGlite's memory, which "RSS at its start" shows before any load. The node:http floor's row is what
  Node itself needs for the same 1,000 streams after the same kind of load, with nothing of the gateway's: the targets table
  gives its peak beside the gateway's.
- **Floors** put the gateway's figures in proportion: the same call through a proxy that does nothing else, on node:http and on
  Fastify, measured the same way. The gateway's CPU per request minus Fastify's floor is the cost of its own work (auth, limiter,
  budget, routing, usage, metrics); the node:http floor bounds what any Node proxy of this call reaches on this core.
  The node:http floor also takes the 50 ms and the streaming scenarios (streams relayed byte for byte, with no SSE parsing),
  and the targets table gives its figure beside each latency target: under the same synchronised load (50 connections whose
  requests come back together every 50 ms), what a Node proxy that does nothing but relay adds on one core.`;

/** docs/performance.md, regenerated by every full run. */
export function renderMarkdown(results) {
  const disturbed =
    results.otherCpu.meanCores > 0.25
      ? `\n\n**This run was disturbed**: other processes used ${results.otherCpu.meanCores.toFixed(2)} cores on average; rerun on a quiet machine before comparing.`
      : '';
  return `# Performance: what the gateway costs

<!-- Generated by \`npm run bench\` (bench/run.mjs); edits are overwritten. -->

Measured ${results.machine.date.slice(0, 16).replace('T', ' ')} UTC. Every figure compares the gateway with the same traffic sent
straight to the upstream, in the same run.${disturbed}

## Results

${renderTables(results)}

${READING}

${method(results)}
`;
}
