import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, type RedisServer, startPostgres, startRedis } from '@gw/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN, startGateway, type TestGateway } from './helpers/gateway.js';
import { type GatewayProcess, spawnGateway } from './helpers/process.js';

/** Each way between instance two and Redis: an instance in another zone than Redis. */
const LATENCY_MS = 15;

let pg: PostgresServer;
let redis: RedisServer;
let sim: Simulator;
let far: Server;
let one: TestGateway;
let two: GatewayProcess;
let dir: string;

/** A TCP relay to Redis that holds every chunk `ms` before passing it on, in order. */
async function slowLink(target: URL, ms: number): Promise<Server> {
  const server = createServer((client: Socket) => {
    const upstream = connect(Number(target.port), target.hostname);
    const relay = (from: Socket, to: Socket) => {
      from.on('data', (chunk) => setTimeout(() => to.writable && to.write(chunk), ms));
      from.on('close', () => setTimeout(() => to.destroy(), ms));
      from.on('error', () => {});
    };
    relay(client, upstream);
    relay(upstream, client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return server;
}

beforeAll(async () => {
  [pg, redis, sim] = await Promise.all([startPostgres(), startRedis(), startSimulator({ latencyScale: 0 })]);
  const databaseUrl = await pg.createDatabase();
  far = await slowLink(new URL(redis.url), LATENCY_MS);
  const farUrl = `redis://127.0.0.1:${(far.address() as { port: number }).port}`;
  one = await startGateway({ databaseUrl, redisUrl: redis.url, sim });
  dir = mkdtempSync(join(tmpdir(), 'gw-confirm-'));
  writeFileSync(join(dir, 'gw.json'), JSON.stringify(sim.demoConfig()));
  two = await spawnGateway({
    GW_CONFIG: join(dir, 'gw.json'),
    GW_DATA_DIR: join(dir, 'data'),
    DATABASE_URL: databaseUrl,
    REDIS_URL: farUrl,
    GW_ADMIN_TOKEN: ADMIN_TOKEN,
  });
}, 120_000);

afterAll(async () => {
  if (two && two.child.exitCode === null) {
    two.child.kill('SIGTERM');
    await two.exited;
  }
  await one?.close();
  far?.close();
  await sim?.close();
  await pg?.stop();
  await redis?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const auth = (key: string) => ({ authorization: `Bearer ${key}` });
const models = async (url: string, key: string) => (await fetch(`${url}/v1/models`, { headers: auth(key) })).status;
const modelIdsB = async (url: string, key: string) =>
  ((await (await fetch(`${url}/alt/v1/models`, { headers: auth(key) })).json()) as { data: { id: string }[] }).data.map((m) => m.id);
const chat = async (url: string, key: string) => {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { ...auth(key), 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'meta/llama-3.3-70b', max_tokens: 1, messages: [{ role: 'user', content: 'confirm' }] }),
  });
  await res.arrayBuffer();
  return res.status;
};

/** Requests on instance two the whole time `during` runs, as a busy instance has. */
async function underLoad(during: () => Promise<void>): Promise<void> {
  const { key } = await one.createKey({ rateLimitRpm: 1_000_000 });
  let running = true;
  const loops = Array.from({ length: 8 }, async () => {
    while (running) await chat(two.url, key).catch(() => 0);
  });
  try {
    await during();
  } finally {
    running = false;
    await Promise.all(loops);
  }
}

describe('a key or workspace change answered on one instance', () => {
  it('applies from the very next request on another instance, also one far from Redis and busy', async () => {
    const slips: string[] = [];
    await underLoad(async () => {
      for (let i = 0; i < 50; i++) {
        const { id, key } = await one.createKey();
        expect(await models(two.url, key)).toBe(200);
        await one.admin('POST', `/keys/${id}/revoke`);
        if ((await models(two.url, key)) !== 401) slips.push(`revoke ${i}`);
      }
      for (let i = 0; i < 30; i++) {
        const { id, key } = await one.createKey({ rateLimitRpm: 1000 });
        expect(await chat(two.url, key)).toBe(200);
        // The window holds one request: a limit of 1 refuses the next.
        await one.admin('PATCH', `/keys/${id}`, { rateLimitRpm: 1 });
        if ((await chat(two.url, key)) !== 429) slips.push(`rateLimitRpm ${i}`);
      }
      for (let i = 0; i < 20; i++) {
        const ws = await one.admin<{ id: string }>('POST', '/workspaces', { name: `ws${i}`, enabledModels: null });
        const { key } = await one.createKey({ workspaceId: ws.body.id });
        expect((await modelIdsB(two.url, key)).length).toBeGreaterThan(1);
        await one.admin('PATCH', `/workspaces/${ws.body.id}`, { enabledModels: ['mistral/small'] });
        if ((await modelIdsB(two.url, key)).join() !== 'mistral/small') slips.push(`workspace ${i}`);
      }
    });
    expect(slips).toEqual([]);
    expect(one.gateway.services.auth.confirmations.waiting).toBe(0);
  }, 120_000);

  it('answers after about a second when a subscriber does not confirm, and logs how many did not', async () => {
    // Subscribed to the channel, but no gateway: it never confirms.
    const outsider = new Redis(redis.url);
    try {
      await outsider.subscribe('gw:keys');
      const { id, key } = await one.createKey();
      expect(await models(one.url, key)).toBe(200);
      const admin = (method: string, path: string) => fetch(`${two.url}/admin/v1${path}`, { method, headers: auth(ADMIN_TOKEN) });
      const started = performance.now();
      const revoked = await admin('POST', `/keys/${id}/revoke`);
      const took = performance.now() - started;
      expect(revoked.status).toBe(200);
      expect(took).toBeGreaterThanOrEqual(950);
      expect(took).toBeLessThan(3000);
      // The instances themselves confirmed: the change holds on both.
      expect(await models(one.url, key)).toBe(401);
      expect(await models(two.url, key)).toBe(401);
      const warning = two
        .output()
        .split('\n')
        .find((line) => line.includes('did not confirm'));
      expect(warning).toContain('1 of 3 subscribers of gw:keys did not confirm the key change within 1000 ms');
      expect(warning).toContain(id);
      expect(warning).not.toContain(key);
    } finally {
      outsider.disconnect();
    }
  }, 30_000);
});
