import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Simulator, startSimulator } from '@gw/simulator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RESERVATION_TTL_MS } from '../src/limits/budget-types.js';
import { chatAt, worst } from './helpers/budget-chat.js';
import { ADMIN_TOKEN } from './helpers/gateway.js';
import { type GatewayProcess, spawnGateway } from './helpers/process.js';
import { steppableClockEnv, stepWallClock } from './helpers/step-clock.js';

// The one instance of the embedded store: budgets are held in its own memory.
let sim: Simulator;
let gw: GatewayProcess;
let dir: string;

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  dir = mkdtempSync(join(tmpdir(), 'gw-hold-clock-'));
  writeFileSync(join(dir, 'gw.json'), JSON.stringify(sim.demoConfig()));
  gw = await spawnGateway({ GW_CONFIG: join(dir, 'gw.json'), GW_DATA_DIR: join(dir, 'data'), GW_ADMIN_TOKEN: ADMIN_TOKEN, ...steppableClockEnv(dir) });
}, 60_000);

afterAll(async () => {
  if (gw && gw.child.exitCode === null) {
    gw.child.kill('SIGKILL');
    await gw.exited;
  }
  await sim?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const chat = (key: string) => chatAt(`${gw.url}/v1`, key);

describe('the budget hold of a running request, when the wall clock steps past a hold’s life', () => {
  it('still holds its room: a second request the budget has no room for beside it is refused 402', async () => {
    const res = await fetch(`${gw.url}/admin/v1/keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ budget: worst * 1.5, rateLimitRpm: 1000 }),
    });
    const { key } = (await res.json()) as { key: string };
    sim.providers.scaleway?.configure({ latencyMs: 2_000 });
    try {
      const running = chat(key);
      await new Promise((r) => setTimeout(r, 500));
      // A VM resumed after a long pause, or an operator's step: on the wall clock, the running request's hold lapsed.
      await stepWallClock(gw, dir, RESERVATION_TTL_MS + 60_000);
      const second = await chat(key);
      expect(second.status).toBe(402);
      await second.arrayBuffer();
      expect((await running).status).toBe(200);
    } finally {
      sim.providers.scaleway?.configure({ latencyMs: 0 });
    }
  }, 20_000);
});
