import { type Simulator, startSimulator } from '@gw/simulator';
import { type RedisServer, startRedis } from '@gw/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';
import { chatBody, post } from './helpers/idempotent.js';
import { startTcpProxy, type TcpProxy } from './helpers/tcp-proxy.js';

let redis: RedisServer;
let proxy: TcpProxy;
let sim: Simulator;
let gw: TestGateway;
const chats = () => sim.providers.scaleway?.stats().byEndpoint.chat ?? 0;

beforeAll(async () => {
  [redis, sim] = await Promise.all([startRedis(), startSimulator({ latencyScale: 0 })]);
  proxy = await startTcpProxy(Number(new URL(redis.url).port));
  gw = await startGateway({ sim, redisUrl: `redis://127.0.0.1:${proxy.port}`, env: { GW_IDEMPOTENCY_WAIT_MS: '300' } });
}, 60_000);

afterAll(async () => {
  await gw?.close();
  await proxy?.close();
  await Promise.all([sim?.close(), redis?.stop()]);
});

describe('a keyed request whose claim Redis runs after its command timed out', () => {
  it('leaves no claim behind: the retry runs once Redis is fast again, not 409 until the claim runs out (60 s)', async () => {
    const { key } = await gw.createKey({ rateLimitRpm: 1000 });
    const headers = { 'x-idempotency-key': 'slow-redis-claim' };
    const before = chats();
    // Each command reaches Redis 2.5 s late: past the idempotency connection's 2 s timeout, so the request is refused
    // (nothing run), and its claim lands half a second later.
    proxy.slow(2500);
    const first = await post(gw.baseB, key, chatBody('claimed late'), headers);
    expect(first.status).toBe(503);
    expect(JSON.parse(first.text).error.code).toBe('service_unavailable');
    proxy.slow(0);
    // By now the late claim has landed.
    await new Promise((r) => setTimeout(r, 1500));
    let retry = first;
    await eventually(async () => {
      retry = await post(gw.baseB, key, chatBody('claimed late'), headers);
      expect(retry.status).toBe(200);
    }, 6_000);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    expect(chats()).toBe(before + 1);
  }, 30_000);
});
