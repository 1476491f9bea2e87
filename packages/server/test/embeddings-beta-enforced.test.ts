import { createServer, type Server, type Socket, connect as tcpConnect } from 'node:net';
import { type Simulator, startSimulator } from '@gw/simulator';
import { type RedisServer, startRedis } from '@gw/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';

let redis: RedisServer;
let sim: Simulator;
let gw: TestGateway;
let proxy: Server;
const open = new Set<Socket>();
/** Set: the next command naming the beta's window kills Redis before it reaches it. */
let killOnBeta: (() => void) | null = null;

// Redis reached through a proxy that can kill it between a request's two limits: the key's count answered, the
// embeddings beta's admission not yet sent.
beforeAll(async () => {
  [redis, sim] = await Promise.all([startRedis(), startSimulator({ latencyScale: 0 })]);
  proxy = createServer((client) => {
    const upstream = tcpConnect(redis.port, '127.0.0.1');
    for (const s of [client, upstream]) {
      open.add(s);
      s.on('error', () => {});
      s.on('close', () => {
        open.delete(s);
        client.destroy();
        upstream.destroy();
      });
    }
    upstream.pipe(client);
    client.on('data', (chunk: Buffer) => {
      const kill = killOnBeta;
      if (kill && chunk.includes('gw:beta:')) {
        killOnBeta = null;
        kill();
        return;
      }
      upstream.write(chunk);
    });
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  gw = await startGateway({ sim, redisUrl: `redis://127.0.0.1:${(proxy.address() as { port: number }).port}` });
}, 60_000);

afterAll(async () => {
  await gw?.close();
  for (const s of open) s.destroy();
  await new Promise<void>((resolve) => proxy?.close(() => resolve()));
  await sim?.close();
  await redis?.stop();
});

function embed(key: string) {
  return fetch(`${gw.baseB}/embeddings`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'mistral/embed', input: 'x' }),
  });
}

describe("X-RateLimit-Enforced on variant B's embeddings, which both the key's limit and the beta's window hold", () => {
  it('says false when Redis died after the key was counted but before the beta window was asked: that request was held to neither', async () => {
    const { key } = await gw.createKey({ rateLimitRpm: 1000 });
    const enforced = await embed(key);
    expect([enforced.status, enforced.headers.get('x-ratelimit-enforced')]).toEqual([200, 'true']);
    await enforced.arrayBuffer();
    let killed: Promise<void> = Promise.resolve();
    killOnBeta = () => {
      killed = redis.kill();
    };
    const res = await embed(key);
    await killed;
    expect(killOnBeta).toBeNull();
    expect(res.status).toBe(200);
    // The key's count was enforced (Redis answered it); the beta's window let it through unenforced.
    expect(res.headers.get('x-ratelimit-limit')).toBe('1000');
    expect(res.headers.get('x-ratelimit-enforced')).toBe('false');
    await res.arrayBuffer();
    // With Redis gone, both limits let requests through unenforced.
    const after = await embed(key);
    expect([after.status, after.headers.get('x-ratelimit-enforced')]).toEqual([200, 'false']);
    await after.arrayBuffer();
  }, 20_000);
});
