import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { eventually } from './helpers/gateway.js';
import { type GatewayProcess, spawnGateway } from './helpers/process.js';

const root = mkdtempSync(join(tmpdir(), 'gw-demo-controls-'));
let gw: GatewayProcess | undefined;

afterAll(async () => {
  if (gw && gw.child.exitCode === null) {
    gw.child.kill('SIGTERM');
    await gw.exited;
  }
  rmSync(root, { recursive: true, force: true });
});

describe('demo mode', () => {
  it('prints where each simulated provider takes its faults, so that a failover can be tried (their ports are random)', async () => {
    gw = await spawnGateway({ GW_DATA_DIR: join(root, 'data') });
    const g = gw;
    let controls = '';
    await eventually(() => {
      controls = /their faults, timings and stats \(packages\/simulator\/README\.md\): (.+)/.exec(g.output())?.[1] ?? '';
      expect(controls).not.toBe('');
    });
    const scaleway = /scaleway (http:\/\/127\.0\.0\.1:\d+\/__sim\/)/.exec(controls)?.[1];
    expect(scaleway).toBeDefined();
    expect(controls.match(/http:\/\/127\.0\.0\.1:\d+\/__sim\//g)).toHaveLength(6);
    const key = /shown once, keep it\): (gw_live_\S+)/.exec(g.output())?.[1] as string;

    const set = await fetch(`${scaleway}faults`, { method: 'POST', body: JSON.stringify({ kind: 'status', status: 503, times: 1 }) });
    expect(set.status).toBe(200);
    const pinned = await fetch(`${g.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-gateway-provider': 'scaleway' },
      body: JSON.stringify({ model: 'mistral/small', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(pinned.status).toBeGreaterThanOrEqual(500);
    const stats = (await (await fetch(`${scaleway}stats`)).json()) as { faultsApplied: number };
    expect(stats.faultsApplied).toBe(1);
  });
});
