import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Simulator, startSimulator } from '@gw/simulator';
import { type RedisServer, startRedis } from '@gw/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN, eventually } from './helpers/gateway.js';
import { type GatewayProcess, spawnGateway } from './helpers/process.js';

let sim: Simulator;
let server: RedisServer;
let redis: Redis;
let proc: GatewayProcess;
let dir: string;

beforeAll(async () => {
  [sim, server] = await Promise.all([startSimulator({ latencyScale: 0 }), startRedis()]);
  redis = new Redis(server.url);
  dir = mkdtempSync(join(tmpdir(), 'gw-warning-log-'));
  writeFileSync(join(dir, 'gw.json'), JSON.stringify(sim.demoConfig()));
  proc = await spawnGateway({ GW_CONFIG: join(dir, 'gw.json'), GW_DATA_DIR: join(dir, 'data'), GW_ADMIN_TOKEN: ADMIN_TOKEN, REDIS_URL: server.url });
}, 60_000);

afterAll(async () => {
  if (proc && proc.child.exitCode === null) proc.child.kill('SIGKILL');
  redis?.disconnect();
  await server?.stop();
  await sim?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** The log lines with this message, parsed. */
const linesOf = (msg: string) =>
  proc
    .output()
    .split('\n')
    .filter((l) => l.includes(`"msg":"${msg}"`))
    .map((l) => JSON.parse(l) as { err?: { message?: string } });

describe('warnings about a failed write', () => {
  it('give the error’s summary, not the Redis command it failed on with the stored answer (user content) in its arguments', async () => {
    const created = await fetch(`${proc.url}/admin/v1/keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ rateLimitRpm: 1000 }),
    });
    const { key } = (await created.json()) as { key: string };
    // The simulator's answer echoes the question's words: the stored answer holds this.
    const userContent = 'confidential-patient-note-7731';
    sim.providers.scaleway?.configure({ latencyMs: 1500 });
    try {
      const answer = fetch(`${proc.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-gateway-provider': 'scaleway', 'x-idempotency-key': 'warn-log-1' },
        body: JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: `${userContent} ${userContent}` }], max_tokens: 20 }),
      });
      // The key is claimed and the upstream is answering: Redis then refuses every write (full, no eviction).
      await new Promise((r) => setTimeout(r, 700));
      await redis.config('SET', 'maxmemory', '1');
      const res = await answer;
      expect(res.status).toBe(200);
      expect(await res.text()).toContain(userContent);
      await eventually(() => expect(linesOf('idempotency: storing the answer failed').length).toBeGreaterThan(0), 5000);
    } finally {
      await redis.config('SET', 'maxmemory', '0');
      sim.providers.scaleway?.configure({ latencyMs: 0 });
    }
    const [line] = linesOf('idempotency: storing the answer failed');
    expect(line?.err?.message).toMatch(/OOM/);
    expect(JSON.stringify(line)).not.toContain(userContent);
    expect(proc.output()).not.toContain(userContent);
  }, 30_000);
});
