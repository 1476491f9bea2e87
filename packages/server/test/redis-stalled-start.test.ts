import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Simulator, startSimulator } from '@gw/simulator';
import { type RedisServer, startRedis } from '@gw/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN, eventually } from './helpers/gateway.js';
import { type GatewayProcess, spawnGateway } from './helpers/process.js';

// A gateway (re)started while Redis takes connections but answers nothing (a stalled or paused Redis, as in a
// partition after the handshake) starts as it does with Redis gone: it serves, its limits failing open, and takes Redis
// up again once it answers. It waited for Redis's first reply, without a listener, for as long as the stall lasted.

let sim: Simulator;
let redis: RedisServer;
let proc: GatewayProcess | undefined;
let dir: string;

beforeAll(async () => {
  [sim, redis] = await Promise.all([startSimulator({ latencyScale: 0 }), startRedis()]);
  dir = mkdtempSync(join(tmpdir(), 'gw-redis-stalled-start-'));
  writeFileSync(join(dir, 'gw.json'), JSON.stringify(sim.demoConfig()));
}, 60_000);

afterAll(async () => {
  if (proc && proc.child.exitCode === null) proc.child.kill('SIGKILL');
  redis?.resume();
  await sim?.close();
  await redis?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const readyz = async (url: string) => {
  const res = await fetch(`${url}/readyz`);
  return { status: res.status, body: (await res.json()) as { status: string; redis: string } };
};

describe('a start while Redis is stalled', () => {
  it('listens within seconds, serves with its limits failing open, and uses Redis once it answers again', async () => {
    redis.pause();
    // A bound a loaded machine's start keeps to (the embedded store alone can take seconds), where a stalled start never ends.
    const startedAt = Date.now();
    proc = await spawnGateway(
      { GW_CONFIG: join(dir, 'gw.json'), GW_DATA_DIR: join(dir, 'data'), REDIS_URL: redis.url, GW_ADMIN_TOKEN: ADMIN_TOKEN },
      30_000,
    ).catch((err: unknown) => {
      redis.resume();
      throw err;
    });
    expect(Date.now() - startedAt).toBeLessThan(30_000);
    const url = proc.url;
    expect(await readyz(url)).toEqual({ status: 200, body: expect.objectContaining({ status: 'ready', redis: 'unreachable' }) });

    const created = await fetch(`${url}/admin/v1/keys`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    const { key } = (await created.json()) as { key: string };
    const chat = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mistral/small', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(chat.status).toBe(200);
    expect(chat.headers.get('x-ratelimit-enforced')).toBe('false');

    redis.resume();
    await eventually(async () => expect((await readyz(url)).body.redis).toBe('ok'), 10_000);
    // Its channels (revocations, offer health) are subscribed once Redis answers, so other instances' word reaches it.
    const client = new Redis(redis.url);
    try {
      await eventually(async () => {
        const channels = (await client.pubsub('CHANNELS')) as string[];
        expect(channels).toEqual(expect.arrayContaining(['gw:keys', 'gw:keys:ack', 'gw:offer-stats']));
      }, 5_000);
    } finally {
      client.disconnect();
    }
    const limited = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mistral/small', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(limited.status).toBe(200);
    expect(limited.headers.get('x-ratelimit-enforced')).toBe('true');

    proc.child.kill('SIGTERM');
    expect(await proc.exited).toBe(0);
  }, 90_000);
});
