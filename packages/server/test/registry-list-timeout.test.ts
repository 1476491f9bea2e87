import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Simulator, startSimulator } from '@gw/simulator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN } from './helpers/gateway.js';
import { type GatewayProcess, spawnGateway } from './helpers/process.js';

let sim: Simulator;
let proc: GatewayProcess;
let dir: string;

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  dir = mkdtempSync(join(tmpdir(), 'gw-registry-timeout-'));
  writeFileSync(join(dir, 'gw.json'), JSON.stringify(sim.demoConfig()));
  proc = await spawnGateway({ GW_CONFIG: join(dir, 'gw.json'), GW_DATA_DIR: join(dir, 'data'), GW_ADMIN_TOKEN: ADMIN_TOKEN });
}, 60_000);

afterAll(async () => {
  if (proc && proc.child.exitCode === null) proc.child.kill('SIGKILL');
  await sim?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('a provider whose model list never comes', () => {
  it('is reported stale by the rebuild, and the log says it did not answer in time, not that the request was aborted', async () => {
    sim.providers.scaleway?.setFault({ kind: 'hang', endpoints: ['models'] });
    const res = await fetch(`${proc.url}/admin/v1/registry/rebuild`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { providers: Record<string, string> }).providers.scaleway).toBe('stale');
    const lines = proc
      .output()
      .split('\n')
      .filter((l) => l.includes('model list of scaleway could not be fetched'));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain('model list of scaleway could not be fetched: no answer from scaleway within 10 s; its last list is kept');
  }, 30_000);
});
