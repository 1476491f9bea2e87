import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { Metrics } from '../src/http/metrics.js';

const readme = readFileSync(new URL('../../../README.md', import.meta.url), 'utf8');

/** Every metric an instance can expose: the gauges it watches and Redis's, registered as a start with Redis does. */
async function exposed(): Promise<string[]> {
  const metrics = new Metrics();
  const zero = () => 0;
  metrics.watch({
    requestsInFlight: zero,
    streamsOpen: zero,
    streamMemoryBytes: zero,
    streamReclaims: () => ({ copies: 0, streams: 0 }),
    usagePending: zero,
    usageSpilled: () => ({ segments: 0, oldestAgeS: 0 }),
    logLinesDropped: zero,
  });
  metrics.redisUp();
  return (await metrics.registry.getMetricsAsJSON()).map((m) => m.name);
}

/** Node's process figures (prom-client's defaults), which README names by their prefixes. */
const PROCESS = /^gw_(process|nodejs)_/;

describe("README's metric names", () => {
  it('name every metric of the gateway, and each one it names exists', async () => {
    const names = await exposed();
    const own = names.filter((n) => !PROCESS.test(n));
    expect(own.length).toBeGreaterThan(10);
    for (const name of own) expect(readme, `${name} is not in README`).toContain(`\`${name}`);
    expect(names.some((n) => n.startsWith('gw_process_'))).toBe(true);
    expect(names.some((n) => n.startsWith('gw_nodejs_'))).toBe(true);
    // Backquoted in README (a key's prefix, gw_live_, is no metric).
    const named = new Set([...readme.matchAll(/`(gw_[a-z_]+?)(?:\{[^`]*)?`/g)].map(([, n]) => n as string).filter((n) => n !== 'gw_live_'));
    expect(named.size).toBeGreaterThan(10);
    for (const name of named) expect(names, `README names ${name}`).toContain(name);
  });
});
