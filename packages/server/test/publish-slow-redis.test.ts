import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisBus } from '../src/kv/redis.js';
import { ADMIN_TOKEN, eventually, type TestGateway } from './helpers/gateway.js';
import type { GatewayProcess } from './helpers/process.js';
import { type RedisBehindProxy, startRedisBehindProxy } from './helpers/redis-behind-proxy.js';
import type { TcpProxy } from './helpers/tcp-proxy.js';

let env: RedisBehindProxy;
let proxy: TcpProxy;
let one: GatewayProcess;
let two: TestGateway;

beforeAll(async () => {
  env = await startRedisBehindProxy('gw-slow-publish-');
  ({ proxy, one, two } = env);
}, 60_000);

afterAll(() => env?.close());

const admin = (method: string, path: string) => fetch(`${one.url}/admin/v1${path}`, { method, headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
const chat = (key: string) =>
  fetch(`${one.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'mistral/small', messages: [{ role: 'user', content: 'hi' }] }),
  });

describe('best-effort publishes while every Redis reply is 800 ms late', () => {
  it('registry rebuilds and offer stats leave the publishing connection up: an admin change after them is confirmed', async () => {
    const { id } = await two.createKey({ rateLimitRpm: 10_000 });
    const { key } = await two.createKey({ rateLimitRpm: 10_000 });
    expect((await chat(key)).status).toBe(200);
    proxy.slow(800);
    try {
      // Three rebuild publishes and a second of offer-stats batches, each answered 800 ms late.
      for (let i = 0; i < 3; i++) expect((await admin('POST', '/registry/rebuild')).status).toBe(200);
      for (let i = 0; i < 10; i++) {
        expect((await chat(key)).status).toBe(200);
        await new Promise((r) => setTimeout(r, 100));
      }
      const res = await admin('POST', `/keys/${id}/revoke`);
      expect([res.status, res.headers.get('x-gateway-propagation')]).toEqual([200, 'confirmed']);
    } finally {
      proxy.slow(0);
    }
  }, 60_000);
});

describe('best-effort publishes while Redis does not answer', () => {
  it('do not pile up: past 64 waiting one fails at once, and the waiting ones fail when the connection is made anew after 10 s of silence', async () => {
    const bus = await RedisBus.connect(`redis://127.0.0.1:${proxy.port}`);
    proxy.hold();
    try {
      const outcomes = Array.from({ length: 70 }, () =>
        bus.publish('gw:test', 'x').then(
          () => 'answered',
          (err: Error) => err.message,
        ),
      );
      const first = await Promise.race([Promise.all(outcomes.slice(64)), new Promise((r) => setTimeout(() => r('waiting'), 1_000))]);
      expect(first).toEqual(Array(6).fill('Redis has not answered 64 publishes'));
      const waited = await Promise.all(outcomes.slice(0, 64));
      expect(waited.every((o) => o !== 'answered')).toBe(true);
    } finally {
      proxy.release();
    }
    // Made anew and answering: publishes go again.
    await eventually(async () => expect(await bus.publish('gw:test', 'x')).toBe(0), 5_000);
    await bus.close();
  }, 30_000);
});
