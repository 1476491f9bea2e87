import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Simulator, startSimulator } from '@gw/simulator';
import { type RedisServer, startRedis } from '@gw/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN } from './helpers/gateway.js';
import { type GatewayProcess, spawnGateway } from './helpers/process.js';
import { steppableClockEnv, stepWallClock } from './helpers/step-clock.js';

// After a Redis command fails, an instance leaves Redis alone for a second (limits/circuit-breaker.ts), then tries again.
let redis: RedisServer;
let sim: Simulator;
let proc: GatewayProcess;
let dir: string;

beforeAll(async () => {
  [redis, sim] = await Promise.all([startRedis(), startSimulator({ latencyScale: 0 })]);
  dir = mkdtempSync(join(tmpdir(), 'gw-breaker-clock-'));
  writeFileSync(join(dir, 'gw.json'), JSON.stringify(sim.demoConfig()));
  proc = await spawnGateway({
    GW_CONFIG: join(dir, 'gw.json'),
    GW_DATA_DIR: join(dir, 'data'),
    REDIS_URL: redis.url,
    GW_ADMIN_TOKEN: ADMIN_TOKEN,
    ...steppableClockEnv(dir),
  });
}, 60_000);
afterAll(async () => {
  proc?.child.kill('SIGKILL');
  redis?.resume();
  await redis?.stop();
  await sim?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function createKey(): Promise<string> {
  const res = await fetch(`${proc.url}/admin/v1/keys`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ rateLimitRpm: 1000 }),
  });
  return ((await res.json()) as { key: string }).key;
}

/** A chat completion with an idempotency key of its own: it needs Redis to answer. */
function keyedChat(key: string): Promise<Response> {
  return fetch(`${proc.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-idempotency-key': randomUUID() },
    body: JSON.stringify({ model: 'mistral/small', messages: [{ role: 'user', content: 'hi' }] }),
  });
}

describe('Redis left alone after a failure, when the wall clock is stepped meanwhile', () => {
  it('a step back of two minutes does not keep an instance off a Redis that answers again for two minutes', async () => {
    const key = await createKey();
    expect((await keyedChat(key)).status).toBe(200);
    redis.pause();
    try {
      expect((await keyedChat(key)).status).toBe(503);
      await stepWallClock(proc, dir, -120_000);
    } finally {
      redis.resume();
    }
    await new Promise((r) => setTimeout(r, 1_500));
    const deadline = Date.now() + 3_000;
    let status = 503;
    while (status === 503 && Date.now() < deadline) {
      const res = await keyedChat(key);
      await res.arrayBuffer();
      status = res.status;
      if (status === 503) await new Promise((r) => setTimeout(r, 200));
    }
    expect(status).toBe(200);
  }, 30_000);
});
