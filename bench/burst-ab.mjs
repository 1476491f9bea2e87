// The 1,000-stream burst's resident memory of two builds, one after the other, each fresh and warmed by the same
// stream load first: `node bench/burst-ab.mjs <other dist/main.js> [rounds] [--prod]`. A is the other build, B the working tree's.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { killChildrenOnExit, pinSelf } from './lib/processes.mjs';
import { GATEWAY_MAIN, startGateway, startPostgresPinned, startRedis, startUpstream } from './lib/services.mjs';
import { runStreamBurst, runStreamLoad } from './lib/stream-driver.mjs';
import { gatewayModelId } from './upstream/profiles.mjs';

killChildrenOnExit();
pinSelf(1);
const [otherMain, roundsArg] = process.argv.slice(2).filter((a) => !a.startsWith('--'));
const rounds = Number(roundsArg ?? 2);
const prod = process.argv.includes('--prod');
const dir = mkdtempSync(join(tmpdir(), 'burst-ab-'));
const upstream = await startUpstream({ core: 1, dir });
const backends = {};
if (prod) {
  const pg = await startPostgresPinned({ core: 1 });
  const redis = await startRedis({ core: 1, dir });
  Object.assign(backends, { redisUrl: redis.url, databaseUrl: pg.url });
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const request = (gateway, model) => ({
  url: `${gateway.url}/v1/chat/completions`,
  headers: { authorization: `Bearer ${gateway.key}`, 'content-type': 'application/json' },
  body: JSON.stringify({ model: gatewayModelId(model), messages: [{ role: 'user', content: 'hi' }], stream: true }),
});
for (let round = 1; round <= rounds; round++) {
  for (const [name, mainFile] of [
    ['A', resolve(otherMain)],
    ['B', GATEWAY_MAIN],
  ]) {
    const gateway = await startGateway({ core: 0, dir, name: `${name}${round}`, upstreamUrl: upstream.url, mainFile, ...backends });
    await runStreamLoad({ ...request(gateway, 'stream-50ms-20x10ms'), concurrency: 50, durationS: 8 });
    await sleep(2000);
    const before = gateway.rss();
    let peak = before;
    const burst = await runStreamBurst({ ...request(gateway, 'stream-50ms-20x100ms'), count: 1000, onSample: () => (peak = Math.max(peak, gateway.rss())) });
    peak = Math.max(peak, gateway.rss());
    console.log(
      `round ${round} ${name}: ${burst.ok} ok, RSS before ${(before / 1e6).toFixed(1)} MB, peak ${(peak / 1e6).toFixed(1)} MB (+${((peak - before) / 1e6).toFixed(1)})`,
    );
    await gateway.stop();
  }
}
process.exit(0);
