// CPU per relayed chunk, the gateway beside the node:http floor: `npm run build && node bench/chunk-cost.mjs [rounds]`.
// Both proxies take 50 streams at a time of 20 and of 200 chunks 10 ms apart; the difference in CPU per
// stream (all threads), over the 180 extra chunks, is what one chunk costs; the rest is the stream's setup.
// Long answers at a model's pace are mostly chunks: this is the figure that bounds how many such streams one core relays.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { killChildrenOnExit, pinSelf, removeIfInterrupted } from './lib/processes.mjs';
import { chatRequest } from './lib/profile-runs.mjs';
import { startFloorProxy, startGateway, startUpstream } from './lib/services.mjs';
import { sum } from './lib/stats.mjs';
import { runStreamLoad } from './lib/stream-driver.mjs';

const rounds = Number(process.argv[2] ?? 2);
const SHORT = 'stream-50ms-20x10ms';
const LONG = 'stream-50ms-200x10ms';

killChildrenOnExit();
pinSelf(1);
const dir = mkdtempSync(join(tmpdir(), 'gw-chunk-cost-'));
removeIfInterrupted(dir);
const upstream = await startUpstream({ core: 1, dir });
const gateway = await startGateway({ core: 0, dir, name: 'gateway', upstreamUrl: upstream.url });
const floor = await startFloorProxy({ core: 0, dir, kind: 'node-http', upstreamUrl: upstream.url });

const cpuSeconds = (proxy) => sum(Object.values(proxy.threadCpu()));

/** CPU µs per stream of `model` through `proxy`, 50 at a time for `seconds`. */
async function cpuPerStream(proxy, model, seconds) {
  // The floor ignores the key; both take the gateway's model id.
  const request = chatRequest({ url: proxy.url, key: gateway.key }, model, true);
  await runStreamLoad({ ...request, concurrency: 50, durationS: 1 });
  const before = cpuSeconds(proxy);
  const r = await runStreamLoad({ ...request, concurrency: 50, durationS: seconds });
  if (r.failed > 0) throw new Error(`${r.failed} streams failed: ${JSON.stringify(r.failures)}`);
  return ((cpuSeconds(proxy) - before) * 1e6) / r.ok;
}

try {
  for (let round = 1; round <= rounds; round++) {
    for (const [name, proxy] of [
      ['gateway [embedded]', gateway],
      ['node:http floor', floor],
    ]) {
      const short = await cpuPerStream(proxy, SHORT, 6);
      const long = await cpuPerStream(proxy, LONG, 6);
      const perChunk = (long - short) / 180;
      process.stdout.write(`round ${round}, ${name}: ${perChunk.toFixed(1)} µs per chunk, ${(short - 20 * perChunk).toFixed(0)} µs per stream besides\n`);
    }
  }
} finally {
  await gateway.stop();
  await floor.stop();
  await upstream.stop();
  rmSync(dir, { recursive: true, force: true });
}
