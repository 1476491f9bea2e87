/**
 * The targets (2-core machine, gateway on one core). Each reads one
 * figure from the scenarios of a full run; `max` targets are ceilings,
 * `min` targets floors. `floor` reads the same figure of the node:http floor
 * proxy (nothing but the relay), where the run measured it.
 */
export const TARGETS = [
  addedTarget('added latency p50, 50 ms upstream, 50 connections', 0.35, added, 'http50', 'floorNodeHttpHttp50', 'p50'),
  addedTarget('added latency p99, 50 ms upstream, 50 connections', 1, added, 'http50', 'floorNodeHttpHttp50', 'p99'),
  {
    label: 'capacity, 0 ms upstream, gateway on one core',
    unit: 'req/s',
    min: 5000,
    read: (s) => s.http0?.gateway.rps,
    floor: (s) => s.floorNodeHttp?.gateway.rps,
  },
  addedTarget('added time to first token p50', 0.5, addedTtft, 'stream', 'floorNodeHttpStream', 'p50'),
  addedTarget('added time to first token p99', 2, addedTtft, 'stream', 'floorNodeHttpStream', 'p99'),
  ...burstTargets('embedded', (s) => s.burst),
  ...burstTargets('PostgreSQL + Redis', (s) => s.prodBurst),
  addedTarget('Redis killed (fail-open): added latency p99', 5, added, 'redisDownHttp50', null, 'p99'),
];

/** A ceiling on an added percentile (`measure`: added or addedTtft), read from the gateway's scenario and from the floor's (`floorId` null: none). */
function addedTarget(label, max, measure, gatewayId, floorId, p) {
  const floor = floorId === null ? undefined : (s) => measure(s[floorId], p);
  return { label, unit: 'ms', max, read: (s) => measure(s[gatewayId], p), floor, added: true };
}

/** The burst's targets; the floor's figures are those of the node:http floor under the same burst, after its own scenarios. */
function burstTargets(setup, pick) {
  const floor = (s) => s.floorNodeHttpBurst;
  return [
    {
      label: `1,000 concurrent streams (${setup}): completed`,
      unit: 'streams',
      min: 1000,
      read: (s) => pick(s)?.gateway.ok,
      floor: (s) => floor(s)?.gateway.ok,
    },
    {
      label: `1,000 concurrent streams (${setup}): peak RSS`,
      unit: 'MB',
      max: 250,
      read: (s) => mb(pick(s)?.memory.rssPeak),
      floor: (s) => mb(floor(s)?.memory.rssPeak),
    },
    {
      label: `1,000 concurrent streams (${setup}): RSS after (once idle) vs before the burst`,
      unit: '%',
      max: 10,
      read: (s) => rssGrowthPct(pick(s)?.memory),
      floor: (s) => rssGrowthPct(floor(s)?.memory),
    },
  ];
}

export function added(scenario, p) {
  return scenario ? scenario.gateway.latency[p] - scenario.direct.latency[p] : undefined;
}

export function addedTtft(scenario, p) {
  return scenario ? scenario.gateway.ttft[p] - scenario.direct.ttft[p] : undefined;
}

function mb(bytes) {
  return bytes === undefined ? undefined : bytes / 1024 / 1024;
}

/** RSS after the burst against before it: once the gateway has handed memory back when idle, where the run read that (a floor has no hand-back: read a few seconds after). */
function rssGrowthPct(memory) {
  if (!memory) return undefined;
  const after = memory.rssOnceIdle ?? memory.rssAfter;
  return ((after - memory.rssBefore) / memory.rssBefore) * 100;
}

/**
 * Each target with its measured value, whether it is met, by how much it is missed, and the floor's value (or null).
 * An added figure below zero gets no verdict (`met` null, `noVerdict` set): the gateway's path contains the direct one, so
 * the direct side's percentile came out longer only through a stall on the load side, and the difference says nothing.
 */
export function evaluateTargets(scenarios) {
  return TARGETS.map((t) => {
    const value = t.read(scenarios);
    const limit = t.max ?? t.min;
    const floorValue = t.floor?.(scenarios);
    const floor = floorValue === undefined || Number.isNaN(floorValue) ? null : floorValue;
    const bound = t.max === undefined ? 'min' : 'max';
    if (value === undefined || Number.isNaN(value)) return { label: t.label, unit: t.unit, limit, bound, value: null, met: null, miss: null, floor };
    if (t.added && value < 0) return { label: t.label, unit: t.unit, limit, bound, value, met: null, miss: null, floor, noVerdict: true };
    const met = t.max !== undefined ? value <= t.max : value >= t.min;
    const miss = met ? 0 : Math.abs(value - limit);
    return { label: t.label, unit: t.unit, limit, bound, value, met, miss, floor };
  });
}
