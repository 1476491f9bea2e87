import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, type RedisServer, startPostgres, startRedis } from '@gw/testkit';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectRedis } from '../src/kv/redis.js';
import { MemoryBetaQuota } from '../src/limits/beta-quota.js';
import { RedisBetaQuota } from '../src/limits/redis-beta-quota.js';
import { startGateway, type TestGateway } from './helpers/gateway.js';

let redis: RedisServer;
let pg: PostgresServer;
let sim: Simulator;
let solo: TestGateway;
let one: TestGateway;
let two: TestGateway;

beforeAll(async () => {
  [redis, pg, sim] = await Promise.all([startRedis(), startPostgres(), startSimulator({ latencyScale: 0 })]);
  const databaseUrl = await pg.createDatabase();
  solo = await startGateway({ sim });
  one = await startGateway({ sim, redisUrl: redis.url, databaseUrl });
  two = await startGateway({ sim, redisUrl: redis.url, databaseUrl });
}, 60_000);

afterAll(async () => {
  await Promise.all([solo?.close(), one?.close(), two?.close()]);
  await sim?.close();
  await redis?.stop();
  await pg?.stop();
});

/** A key of a fresh workspace, with a per-key RPM far above the beta's allowance. */
async function workspaceKey(gw: TestGateway): Promise<string> {
  const ws = await gw.admin<{ id: string }>('POST', '/workspaces', { name: `beta ${Math.random()}` });
  return (await gw.createKey({ workspaceId: ws.body.id, rateLimitRpm: 100_000 })).key;
}

function embed(base: string, key: string, input: string | string[] = 'x') {
  return fetch(`${base}/embeddings`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'mistral/embed', input }),
  });
}

/** `n` requests, `width` at a time; returns their statuses in order. */
async function burst(n: number, send: (i: number) => Promise<Response>, width = 25): Promise<number[]> {
  const statuses: number[] = [];
  for (let i = 0; i < n; i += width) {
    const batch = await Promise.all(Array.from({ length: Math.min(width, n - i) }, (_, j) => send(i + j)));
    for (const res of batch) {
      statuses.push(res.status);
      await res.arrayBuffer();
    }
  }
  return statuses;
}

describe('the beta window at its edges (in process, fake clock)', () => {
  it('admits exactly the request allowance, then refuses until the oldest request ages out', () => {
    let now = 1_000_000;
    const quota = new MemoryBetaQuota({ requests: 3, tokens: 1000, windowMs: 60_000 }, () => now);
    for (let i = 0; i < 3; i++) {
      expect(quota.admitSync('ws', `r${i}`, 1).allowed).toBe(true);
      now += 10_000;
    }
    expect(quota.admitSync('ws', 'r3', 1)).toMatchObject({ allowed: false, reason: 'requests', waitMs: 30_000 });
    now = 1_000_000 + 59_999;
    expect(quota.admitSync('ws', 'r4', 1).allowed).toBe(false);
    now = 1_000_000 + 60_000;
    expect(quota.admitSync('ws', 'r5', 1).allowed).toBe(true);
    expect(quota.admitSync('other', 'r6', 1).allowed).toBe(true);
    quota.close();
  });

  it('admits tokens up to the allowance exactly; a settled count replaces the estimate', async () => {
    let now = 0;
    const quota = new MemoryBetaQuota({ requests: 100, tokens: 100, windowMs: 60_000 }, () => now);
    expect(quota.admitSync('ws', 'a', 40).allowed).toBe(true);
    now = 5_000;
    expect(quota.admitSync('ws', 'b', 60).allowed).toBe(true);
    expect(quota.admitSync('ws', 'c', 1)).toMatchObject({ allowed: false, reason: 'tokens', waitMs: 55_000 });
    // The provider counted 30 tokens for `b`, not 60: room for 30 more.
    await quota.settle('ws', 'b', 30);
    expect(quota.admitSync('ws', 'd', 30).allowed).toBe(true);
    expect(quota.admitSync('ws', 'e', 1).allowed).toBe(false);
    quota.close();
  });

  it('with Redis: the same edges, concurrent admissions never exceed the allowance', async () => {
    const client = await connectRedis(redis.url);
    const quota = new RedisBetaQuota(client, { requests: 10, tokens: 1_000, windowMs: 2_000 });
    const results = await Promise.all(Array.from({ length: 30 }, (_, i) => quota.admit('edge', `r${i}`, 10)));
    expect(results.filter((r) => r.allowed)).toHaveLength(10);
    expect(results.find((r) => !r.allowed)).toMatchObject({ reason: 'requests', enforced: true });
    const tokens = await Promise.all(Array.from({ length: 5 }, (_, i) => quota.admit('tok', `t${i}`, 300)));
    expect(tokens.map((r) => r.allowed)).toEqual([true, true, true, false, false]);
    await quota.settle('tok', 't0', 0);
    expect((await quota.admit('tok', 't5', 100)).allowed).toBe(true);
    const denied = await quota.admit('edge', 'late', 1);
    expect(denied.waitMs).toBeGreaterThanOrEqual(1);
    expect(denied.waitMs).toBeLessThanOrEqual(2_000);
    await new Promise((r) => setTimeout(r, denied.waitMs + 50));
    expect((await quota.admit('edge', 'after', 1)).allowed).toBe(true);
    client.disconnect();
  }, 15_000);
  it('with Redis: requests let through while Redis was away are written once it is back, and a refusal waits for the one whose leaving frees a place', async () => {
    const client = await connectRedis(redis.url);
    const limits = { requests: 3, tokens: 1_000, windowMs: 4_000 };
    const quota = new RedisBetaQuota(client, limits);
    client.disconnect();
    const at: number[] = [];
    for (let i = 0; i < 5; i++) {
      at.push(performance.now());
      expect(await quota.admit('away', `w${i}`, 10)).toMatchObject({ allowed: true, enforced: false });
      await new Promise((r) => setTimeout(r, 300));
    }
    await client.connect();
    // Written as soon as the connection is ready.
    for (let i = 0; i < 50 && (await client.zcard('gw:beta:{away}:t')) < 5; i++) await new Promise((r) => setTimeout(r, 50));
    // The write's own promise settles a few microtasks after its reply, which the read above waited for.
    await new Promise((r) => setImmediate(r));
    const refused = await quota.admit('away', 'back', 10);
    const now = performance.now();
    expect(refused).toMatchObject({ allowed: false, reason: 'requests', enforced: true });
    // Five in the window, three allowed: the third's leaving frees a place, not the first's.
    expect(refused.waitMs).toBeGreaterThan((at[2] as number) + limits.windowMs - now - 250);
    expect(refused.waitMs).toBeLessThanOrEqual((at[2] as number) + limits.windowMs - now + 250);
    quota.close();
    client.disconnect();
  }, 15_000);
});

describe('variant B through the gateway: 500 requests and 200,000 tokens per minute per workspace', () => {
  it('admits exactly 500 requests, then 429 rate_limited with Retry-After; variant A is not held to the beta', async () => {
    const key = await workspaceKey(solo);
    const statuses = await burst(500, () => embed(solo.baseB, key));
    expect(statuses.filter((s) => s === 200)).toHaveLength(500);
    const over = await embed(solo.baseB, key);
    expect(over.status).toBe(429);
    const retryAfter = Number(over.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);
    const body = (await over.json()) as { error: { code: string; type: string; message: string } };
    expect(body.error).toMatchObject({ code: 'rate_limited', type: 'rate_limit_error' });
    expect(body.error.message).toContain('500 requests per minute');
    const sdk = new OpenAI({ apiKey: key, baseURL: solo.baseB, maxRetries: 0 });
    await expect(sdk.embeddings.create({ model: 'mistral/embed', input: 'x' })).rejects.toBeInstanceOf(OpenAI.RateLimitError);
    expect((await embed(solo.baseA, key)).status).toBe(200);
  }, 60_000);

  it('admits up to 200,000 tokens, then refuses even a one-token request', async () => {
    const key = await workspaceKey(solo);
    // 50 texts of 4,000 characters: 50,000 tokens as the provider counts them.
    const big = Array.from({ length: 50 }, (_, i) => `${i}`.padEnd(4000, 'x'));
    for (let i = 0; i < 4; i++) {
      const res = await embed(solo.baseB, key, big);
      expect(res.status).toBe(200);
      expect(((await res.json()) as { usage: { prompt_tokens: number } }).usage.prompt_tokens).toBe(50_000);
    }
    const over = await embed(solo.baseB, key, 'x');
    expect(over.status).toBe(429);
    expect(((await over.json()) as { error: { message: string } }).error.message).toContain('200,000 tokens per minute per workspace');
    // Another workspace has its own allowance.
    expect((await embed(solo.baseB, await workspaceKey(solo), 'x')).status).toBe(200);
  }, 30_000);

  it('a key without a workspace is told the allowance is its own, not a workspace’s', async () => {
    const { key } = await solo.createKey({ rateLimitRpm: 100_000 });
    const big = Array.from({ length: 50 }, (_, i) => `${i}`.padEnd(4000, 'x'));
    for (let i = 0; i < 4; i++) expect((await embed(solo.baseB, key, big)).status).toBe(200);
    const over = await embed(solo.baseB, key, 'x');
    expect(over.status).toBe(429);
    expect(((await over.json()) as { error: { message: string } }).error.message).toBe(
      'Embeddings beta limit exceeded (200,000 tokens per minute per API key)',
    );
  }, 30_000);

  it('the beta’s 429 carries none of the key’s X-RateLimit count: it was the beta’s window that refused, not the key’s', async () => {
    const ws = await solo.admin<{ id: string }>('POST', '/workspaces', { name: `beta headers ${Math.random()}` });
    const { key } = await solo.createKey({ workspaceId: ws.body.id, rateLimitRpm: 60 });
    const big = Array.from({ length: 50 }, (_, i) => `${i}`.padEnd(4000, 'x'));
    for (let i = 0; i < 4; i++) {
      const ok = await embed(solo.baseB, key, big);
      expect(ok.status).toBe(200);
      expect(ok.headers.get('x-ratelimit-remaining')).toBe(String(59 - i));
    }
    const over = await embed(solo.baseB, key, 'x');
    expect(over.status).toBe(429);
    // The key had 55 requests left: a 429 saying so would read as a refusal with room to spare.
    expect(over.headers.get('x-ratelimit-limit')).toBeNull();
    expect(over.headers.get('x-ratelimit-remaining')).toBeNull();
    expect(over.headers.get('x-ratelimit-reset')).toBeNull();
    expect(over.headers.get('x-ratelimit-enforced')).toBe('true');
    const waitMs = Number(over.headers.get('retry-after-ms'));
    expect(waitMs).toBeGreaterThan(50_000);
    expect(Number(over.headers.get('retry-after'))).toBe(Math.ceil(waitMs / 1000));
    // The OpenAI SDK is told the beta's wait, as before.
    const sdk = new OpenAI({ apiKey: key, baseURL: solo.baseB, maxRetries: 0 });
    const refused = await sdk.embeddings.create({ model: 'mistral/embed', input: 'x' }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(OpenAI.RateLimitError);
    expect((refused as InstanceType<typeof OpenAI.RateLimitError>).headers.get('x-ratelimit-remaining')).toBeNull();
    // The key's own count goes on: the next answer of another route carries it again.
    const chat = await fetch(`${solo.baseB}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mistral/small', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(chat.status).toBe(200);
    expect(chat.headers.get('x-ratelimit-remaining')).toBe('53');
  }, 30_000);

  it('requests a key’s spent budget refuses (402) take none of its workspace’s allowance: another key of it is still served', async () => {
    const ws = await solo.admin<{ id: string }>('POST', '/workspaces', { name: `beta budget ${Math.random()}` });
    const spent = await solo.createKey({ workspaceId: ws.body.id, rateLimitRpm: 100_000, budget: 0 });
    const other = await solo.createKey({ workspaceId: ws.body.id, rateLimitRpm: 100_000 });
    // A client retrying its 402s (or a loop that does not read them) a full allowance's worth of times.
    const refused = await burst(500, () => embed(solo.baseB, spent.key));
    expect(new Set(refused)).toEqual(new Set([402]));
    const sdk = new OpenAI({ apiKey: other.key, baseURL: solo.baseB, maxRetries: 0 });
    const { data } = await sdk.embeddings.create({ model: 'mistral/embed', input: 'x', encoding_format: 'float' });
    expect(data[0]?.embedding).toHaveLength(1024);
  }, 60_000);

  it('inputs larger together than the whole minute’s tokens are a 400, not a 429 a client would retry forever', async () => {
    const key = await workspaceKey(solo);
    // 25 texts each just within mistral-embed's context of 8,192 tokens: 204,750 tokens.
    const res = await embed(
      solo.baseB,
      key,
      Array.from({ length: 25 }, () => 'x'.repeat(32_760)),
    );
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { param: string } }).error.param).toBe('input');
  });

  it('a text longer than the model’s context counts as the context: Cohere embeds its start, billed and counted as that', async () => {
    const key = await workspaceKey(solo);
    const sdk = new OpenAI({ apiKey: key, baseURL: solo.baseB, maxRetries: 0 });
    // 60 documents of about 4,700 tokens each, cut by Cohere to embed-multilingual-v3's 512: 30,720 tokens, not 282,000.
    const documents = Array.from({ length: 60 }, (_, i) => `chapter ${i} of a long report `.repeat(700));
    const answer = await sdk.embeddings.create({ model: 'cohere/embed-multilingual-v3', input: documents });
    expect(answer.usage.prompt_tokens).toBe(60 * 512);
    // The window holds what was billed, so the rest of the minute's allowance is left.
    const rest = await embed(
      solo.baseB,
      key,
      Array.from({ length: 20 }, () => 'x'.repeat(32_000)),
    );
    expect(rest.status).toBe(200);
  }, 30_000);

  it('two instances sharing Redis hold one window', async () => {
    const key = await workspaceKey(one);
    const statuses = await burst(520, (i) => embed(i % 2 === 0 ? one.baseB : two.baseB, key));
    expect(statuses.filter((s) => s === 200)).toHaveLength(500);
    expect(statuses.filter((s) => s === 429)).toHaveLength(20);
  }, 60_000);

  it('requests let through while Redis was paused count in the shared window once it is back: the workspace is not given its 500 again', async () => {
    const ws = await one.admin<{ id: string }>('POST', '/workspaces', { name: `beta ${Math.random()}` });
    const key = (await one.createKey({ workspaceId: ws.body.id, rateLimitRpm: 100_000 })).key;
    let during: number[];
    redis.pause();
    try {
      during = await burst(300, () => embed(one.baseB, key));
    } finally {
      redis.resume();
    }
    expect(during.every((s) => s === 200)).toBe(true);
    // The instance writes them once Redis answers (a retry each second), before any other instance is asked.
    const client = await connectRedis(redis.url);
    for (let i = 0; i < 50 && (await client.zcard(`gw:beta:{ws:${ws.body.id}}:t`)) < 300; i++) await new Promise((r) => setTimeout(r, 100));
    client.disconnect();
    const after = await burst(300, (i) => embed(i % 2 === 0 ? one.baseB : two.baseB, key));
    expect(after.filter((s) => s === 200)).toHaveLength(200);
    const over = await embed(two.baseB, key);
    expect(over.status).toBe(429);
    expect(Number(over.headers.get('retry-after'))).toBeLessThanOrEqual(60);
  }, 60_000);

  it('fails open while Redis is paused: a full window lets requests through, and holds again once Redis is back', async () => {
    const key = await workspaceKey(one);
    expect((await burst(500, () => embed(one.baseB, key))).every((s) => s === 200)).toBe(true);
    expect((await embed(one.baseB, key)).status).toBe(429);
    redis.pause();
    try {
      for (let i = 0; i < 5; i++) expect((await embed(one.baseB, key)).status).toBe(200);
    } finally {
      redis.resume();
    }
    // The breaker retries Redis after a second.
    await new Promise((r) => setTimeout(r, 1100));
    expect((await embed(one.baseB, key)).status).toBe(429);
  }, 30_000);
});
