// temp experiment: added TTFT by concurrency
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { killChildrenOnExit, pinSelf } from './lib/processes.mjs';
import { startGateway, startUpstream } from './lib/services.mjs';
import { runStreamLoad } from './lib/stream-driver.mjs';
import { summarise } from './lib/stats.mjs';
import { chatRequest } from './lib/profile-runs.mjs';
killChildrenOnExit(); pinSelf(1);
const dir = mkdtempSync(join(tmpdir(), 'gw-ttft-'));
const upstream = await startUpstream({ core: 1, dir });
const gateway = await startGateway({ core: 0, dir, name: 'g', upstreamUrl: upstream.url, nodeFlags: (process.env.NF ?? '').split(' ').filter(Boolean) });
const model = process.env.MODEL ?? 'stream-50ms-20x10ms';
const direct = { url: upstream.url, key: 'bench-upstream-key' };
const reqFor = (side) => { const r = chatRequest(side === 'g' ? gateway : direct, model, true); if (side === 'd') r.body = r.body.replace(/"model":"[^"]*"/, `"model":"${model}"`); return r; };
await runStreamLoad({ ...reqFor('g'), concurrency: 50, durationS: 6 });
const secs = Number(process.env.SECS ?? 4);
for (const c of (process.env.CONC ?? '1,10,50').split(',').map(Number)) {
  const acc = { d: [], g: [] };
  for (let i = 0; i < 2; i++) for (const side of i % 2 ? ['g', 'd'] : ['d', 'g']) {
    const r = await runStreamLoad({ ...reqFor(side), concurrency: c, durationS: secs });
    acc[side].push(...r.ttft);
  }
  const d = summarise(acc.d), g = summarise(acc.g);
  console.log(`c=${c} n=${acc.g.length} direct p50 ${d.p50.toFixed(2)} p99 ${d.p99.toFixed(2)} | gw p50 ${g.p50.toFixed(2)} p99 ${g.p99.toFixed(2)} | added p50 ${(g.p50 - d.p50).toFixed(2)} p99 ${(g.p99 - d.p99).toFixed(2)}`);
}
await gateway.stop(); await upstream.stop();
