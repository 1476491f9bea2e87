import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Simulator, startSimulator } from '@gw/simulator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN, eventually } from './helpers/gateway.js';
import { chatBody, post } from './helpers/idempotent.js';
import { type GatewayProcess, spawnGateway } from './helpers/process.js';

let sim: Simulator;
let dir: string;
const running: GatewayProcess[] = [];
const scaleway = () => sim.providers.scaleway;
const chats = () => scaleway()?.stats().byEndpoint.chat ?? 0;

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  dir = mkdtempSync(join(tmpdir(), 'gw-idem-restart-'));
  writeFileSync(join(dir, 'gw.json'), JSON.stringify(sim.demoConfig()));
}, 30_000);

afterAll(async () => {
  for (const p of running) if (p.child.exitCode === null) p.child.kill('SIGKILL');
  await sim?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** The embedded gateway on the test's one data directory. */
async function start(): Promise<GatewayProcess> {
  const proc = await spawnGateway({ GW_CONFIG: join(dir, 'gw.json'), GW_DATA_DIR: join(dir, 'data'), GW_ADMIN_TOKEN: ADMIN_TOKEN }, 60_000);
  running.push(proc);
  return proc;
}

describe('an embedded gateway killed while it ran a keyed request', () => {
  it('runs the retry of that key after its restart, rather than answer 409 until the claim would have expired', async () => {
    const first = await start();
    const created = await fetch(`${first.url}/admin/v1/keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ rateLimitRpm: 1000 }),
    });
    const { key } = (await created.json()) as { key: string };
    scaleway()?.configure({ latencyMs: 30_000 });
    const held = post(`${first.url}/alt/v1`, key, chatBody(), { 'x-idempotency-key': 'cut-by-a-kill' }).catch(() => null);
    await eventually(() => expect(scaleway()?.stats().inFlight).toBe(1), 10_000);
    first.child.kill('SIGKILL');
    await first.exited;
    expect(await held).toBeNull();
    scaleway()?.configure({ latencyMs: 0 });

    const again = await start();
    const before = chats();
    const retry = await post(`${again.url}/alt/v1`, key, chatBody(), { 'x-idempotency-key': 'cut-by-a-kill' });
    expect([retry.status, retry.headers.get('idempotent-replayed')]).toEqual([200, null]);
    expect(chats() - before).toBe(1);
    expect(again.output()).toMatch(/1 idempotency keys of requests cut short by the last run's end are free again/);
    // Its answer is the key's from now on.
    const replay = await post(`${again.url}/alt/v1`, key, chatBody(), { 'x-idempotency-key': 'cut-by-a-kill' });
    expect([replay.status, replay.headers.get('idempotent-replayed'), replay.text]).toEqual([200, 'true', retry.text]);
    expect(chats() - before).toBe(1);
  }, 120_000);
});
