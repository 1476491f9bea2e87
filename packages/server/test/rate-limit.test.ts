import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, type RedisServer, startPostgres, startRedis } from '@gw/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectRedis } from '../src/kv/redis.js';
import { MemoryWindowLimiter } from '../src/limits/memory-window.js';
import { RedisWindowLimiter } from '../src/limits/redis-window.js';
import { wav } from './helpers/audio.js';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';
import { exchange, headBeforeUpload } from './helpers/raw-http.js';

let redis: RedisServer;
let pg: PostgresServer;
let sim: Simulator;
let memGw: TestGateway;
let one: TestGateway;
let two: TestGateway;

beforeAll(async () => {
  [redis, pg, sim] = await Promise.all([startRedis(), startPostgres(), startSimulator({ latencyScale: 0 })]);
  const databaseUrl = await pg.createDatabase();
  memGw = await startGateway({ sim });
  one = await startGateway({ sim, redisUrl: redis.url, databaseUrl });
  two = await startGateway({ sim, redisUrl: redis.url, databaseUrl });
}, 60_000);

afterAll(async () => {
  await Promise.all([memGw?.close(), one?.close(), two?.close()]);
  await sim?.close();
  await redis?.stop();
  await pg?.stop();
});

const body = JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'count me' }], max_tokens: 5 });
function chat(base: string, key: string, overrides: { body?: string } = {}) {
  return fetch(`${base}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: overrides.body ?? body,
  });
}

describe.each([
  ['in-process', () => memGw],
  ['Redis', () => one],
])('the sliding window (%s)', (_name, gw) => {
  it('admits exactly the limit, then 429 with Retry-After in each variant’s envelope', async () => {
    const { key } = await gw().createKey({ rateLimitRpm: 5 });
    const remaining: string[] = [];
    for (let i = 0; i < 5; i++) {
      const res = await chat(gw().baseA, key);
      expect(res.status).toBe(200);
      expect(res.headers.get('x-ratelimit-limit')).toBe('5');
      expect(res.headers.get('x-ratelimit-enforced')).toBe('true');
      remaining.push(res.headers.get('x-ratelimit-remaining') as string);
    }
    expect(remaining).toEqual(['4', '3', '2', '1', '0']);
    const a = await chat(gw().baseA, key);
    expect(a.status).toBe(429);
    const retryAfter = Number(a.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);
    expect(Number(a.headers.get('x-ratelimit-reset'))).toBe(retryAfter);
    expect(await a.json()).toEqual({
      error: { message: 'Rate limit exceeded (5 RPM)', type: 'rate_limit_exceeded', code: 'rate_limit_exceeded', param: null },
    });
    const b = await chat(gw().baseB, key);
    expect(b.status).toBe(429);
    expect(((await b.json()) as { error: { code: string } }).error.code).toBe('rate_limited');
  });

  it('does not count GET /models, 401s or unknown models; counts bad bodies', async () => {
    const { key } = await gw().createKey({ rateLimitRpm: 3 });
    for (let i = 0; i < 10; i++) {
      const res = await fetch(`${gw().baseA}/models`, { headers: { authorization: `Bearer ${key}` } });
      expect(res.status).toBe(200);
      expect(res.headers.get('x-ratelimit-limit')).toBeNull();
      expect((await fetch(`${gw().baseB}/models/${encodeURIComponent('mistral/small')}`, { headers: { authorization: `Bearer ${key}` } })).status).toBe(200);
      expect((await chat(gw().baseA, `${key.slice(0, -1)}x`)).status).toBe(401);
      expect((await chat(gw().baseA, key, { body: JSON.stringify({ model: 'ghost/model', messages: [{ role: 'user', content: 'x' }] }) })).status).toBe(404);
    }
    const bad = await chat(gw().baseA, key, { body: JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [], temperature: 9 }) });
    expect(bad.status).toBe(400);
    expect(bad.headers.get('x-ratelimit-remaining')).toBe('2');
    expect((await chat(gw().baseA, key)).headers.get('x-ratelimit-remaining')).toBe('1');
  });

  it("does not count a retired model in B, whose answer is its model_not_found; A's 410 is counted", async () => {
    const { key } = await gw().createKey({ rateLimitRpm: 2 });
    const retired = { body: JSON.stringify({ model: 'mistral/nemo', messages: [{ role: 'user', content: 'x' }] }) };
    for (let i = 0; i < 4; i++) {
      const res = await chat(gw().baseB, key, retired);
      expect([res.status, ((await res.json()) as { error: { code: string } }).error.code, res.headers.get('x-ratelimit-remaining')]).toEqual([
        400,
        'model_not_found',
        null,
      ]);
    }
    const a = await chat(gw().baseA, key, retired);
    await a.arrayBuffer();
    expect([a.status, a.headers.get('x-ratelimit-remaining')]).toEqual([410, '1']);
    expect((await chat(gw().baseB, key)).headers.get('x-ratelimit-remaining')).toBe('0');
  });

  it('counts every other authenticated request, refused ones included, each once', async () => {
    const { key } = await gw().createKey({ rateLimitRpm: 100 });
    const auth = { authorization: `Bearer ${key}` };
    const json = { ...auth, 'content-type': 'application/json' };
    const post = (path: string, headers: Record<string, string>, body?: string) => fetch(`${gw().baseA}${path}`, { method: 'POST', headers, body });
    const refusals: [string, () => Promise<Response>, number][] = [
      ['unknown path', () => fetch(`${gw().baseA}/nothing`, { headers: auth }), 404],
      // Off the model list by a slash (its route with an empty id): an unknown path, counted as any, in both variants.
      ['model list with a trailing slash', () => fetch(`${gw().baseA}/models/`, { headers: auth }), 404],
      ['model list with a trailing slash (B)', () => fetch(`${gw().baseB}/models/`, { headers: auth }), 404],
      ['model entry with an empty family', () => fetch(`${gw().baseB}/models//small`, { headers: auth }), 404],
      ['wrong method', () => fetch(`${gw().baseB}/chat/completions`, { method: 'DELETE', headers: auth }), 405],
      ['no body', () => post('/chat/completions', json), 400],
      ['invalid JSON', () => post('/chat/completions', json, '{"model":'), 400],
      ['not JSON', () => post('/embeddings', { ...auth, 'content-type': 'text/plain' }, 'x'), 415],
      ['too large', () => post('/chat/completions', json, JSON.stringify({ model: 'x', pad: 'x'.repeat(4_200_000) })), 413],
      ['bad body', () => post('/chat/completions', json, JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [] })), 400],
      // Refused for its body, not as model_not_found: counted, although the model it names is unknown.
      ['bad body, unknown model', () => post('/chat/completions', json, JSON.stringify({ model: 'ghost/model', messages: [] })), 400],
      ['route still to come', () => post('/batches', json, '{}'), 501],
    ];
    let left = 100;
    for (const [what, send, status] of refusals) {
      const res = await send();
      await res.arrayBuffer();
      left -= 1;
      expect([what, res.status, res.headers.get('x-ratelimit-remaining')]).toEqual([what, status, String(left)]);
    }
    // The same refusals given to Expect: 100-continue, before the body is asked for: counted too.
    const port = Number(new URL(gw().url).port);
    for (const [path, status] of [
      ['/v1/chat/completions', 413],
      ['/alt/v1/files', 501],
    ] as const) {
      const head = `POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: 5000000\r\nExpect: 100-continue\r\n\r\n`;
      const answer = await exchange(port, head);
      left -= 1;
      // With the rate limit headers, as the same refusal without Expect.
      expect([answer.slice(0, 12), /^x-ratelimit-remaining: (\d+)\r$/im.exec(answer)?.[1]]).toEqual([`HTTP/1.1 ${status}`, String(left)]);
    }
    expect((await chat(gw().baseA, key)).headers.get('x-ratelimit-remaining')).toBe(String(left - 1));
  });

  it('records a 429 at no cost on every model route, as any failure of a request naming a model the key may use', async () => {
    const { id, key } = await gw().createKey({ rateLimitRpm: 1 });
    expect((await chat(gw().baseA, key)).status).toBe(200);
    const auth = { authorization: `Bearer ${key}` };
    const json = { ...auth, 'content-type': 'application/json' };
    const form = new FormData();
    form.append('model', 'openai/whisper-large-v3');
    form.append('file', new Blob([new Uint8Array(wav(1))], { type: 'audio/wav' }), 'a.wav');
    const refused = [
      await fetch(`${gw().baseA}/embeddings`, { method: 'POST', headers: json, body: JSON.stringify({ model: 'baai/bge-m3', input: 'x' }) }),
      await fetch(`${gw().baseB}/rerank`, {
        method: 'POST',
        headers: json,
        body: JSON.stringify({ model: 'cohere/rerank-v3.5', query: 'q', documents: ['a'] }),
      }),
      await fetch(`${gw().baseA}/audio/transcriptions`, { method: 'POST', headers: auth, body: form }),
      await fetch(`${gw().baseA}/chat/completions`, { method: 'POST', headers: { ...json, 'x-idempotency-key': `k-${id}` }, body }),
      await chat(gw().baseA, key),
    ];
    expect(refused.map((r) => r.status)).toEqual([429, 429, 429, 429, 429]);
    const ids = refused.map((r) => r.headers.get('x-request-id'));
    await gw().gateway.services.usage.flush();
    const records = await gw().gateway.services.store.usage.list({ keyId: id });
    const byRequest = new Map(records.map((r) => [r.requestId, r]));
    expect(
      ids.map((rid) => byRequest.get(rid as string)).map((r) => r && { kind: r.kind, model: r.model, status: r.status, errorCode: r.errorCode, cost: r.cost }),
    ).toEqual([
      { kind: 'embedding', model: 'baai/bge-m3', status: 429, errorCode: 'rate_limited', cost: 0 },
      { kind: 'rerank', model: 'cohere/rerank-v3.5', status: 429, errorCode: 'rate_limited', cost: 0 },
      // Refused before its upload was read (the window was already full), so its model is unknown: not recorded.
      undefined,
      { kind: 'chat', model: 'meta/llama-3.3-70b', status: 429, errorCode: 'rate_limited', cost: 0 },
      { kind: 'chat', model: 'meta/llama-3.3-70b', status: 429, errorCode: 'rate_limited', cost: 0 },
    ]);
    expect(records).toHaveLength(5);
  });

  it('refuses an upload of a key whose window is full before reading it (the spool is not filled)', async () => {
    const { key } = await gw().createKey({ rateLimitRpm: 1 });
    expect((await chat(gw().baseA, key)).status).toBe(200);
    const { port } = new URL(gw().baseA);
    // Only a refusal before the body can answer it.
    const answer = await headBeforeUpload(Number(port), '/v1/audio/transcriptions', key);
    expect(answer).toMatch(/^HTTP\/1\.1 429 /);
    expect(answer.toLowerCase()).toContain('retry-after:');
    expect(answer.toLowerCase()).toContain('x-ratelimit-remaining: 0');
  });
});

describe('the limiter at its edge', () => {
  it('in process: the window slides at exactly 60 s', () => {
    let now = 1_000_000;
    const limiter = new MemoryWindowLimiter(() => now);
    for (let i = 0; i < 3; i++) {
      expect(limiter.hitSync('k', 3).allowed).toBe(true);
      now += 10_000;
    }
    expect(limiter.hitSync('k', 3)).toMatchObject({ allowed: false, remaining: 0, resetS: 30 });
    now = 1_000_000 + 59_999;
    expect(limiter.hitSync('k', 3).allowed).toBe(false);
    now = 1_000_000 + 60_000;
    expect(limiter.hitSync('k', 3)).toMatchObject({ allowed: true, remaining: 0 });
    limiter.close();
  });

  it('in process: after the limit is lowered below what the window holds, Retry-After is when the window falls under the new limit', () => {
    let now = 1_000_000;
    const limiter = new MemoryWindowLimiter(() => now);
    for (let i = 0; i < 6; i++) {
      expect(limiter.hitSync('low', 60).allowed).toBe(true);
      now += 5_000;
    }
    // Stamps at 0, 5, …, 25 s; now 30 s. At a limit of 2 a request fits once 5 of them left: at 80 s.
    expect(limiter.hitSync('low', 2)).toMatchObject({ allowed: false, remaining: 0, resetS: 50 });
    // An upload's check before its body (peek) says the same.
    expect(limiter.peek('low', 2)).toMatchObject({ allowed: false, resetS: 50 });
    now = 1_000_000 + 79_999;
    expect(limiter.hitSync('low', 2).allowed).toBe(false);
    now = 1_000_000 + 80_000;
    expect(limiter.hitSync('low', 2).allowed).toBe(true);
    limiter.close();
  });

  it('with Redis: after the limit is lowered below what the window holds, Retry-After is when it falls under the new limit', async () => {
    const client = await connectRedis(redis.url);
    const limiter = new RedisWindowLimiter(client, 4000);
    for (let i = 0; i < 6; i++) {
      expect((await limiter.hit('lowered', 60, `s${i}`)).allowed).toBe(true);
      await new Promise((r) => setTimeout(r, 500));
    }
    const denied = await limiter.hit('lowered', 2, 'late');
    expect(denied.allowed).toBe(false);
    // Oldest-based it would be 1 s; the window falls under 2 only when the fifth stamp leaves, about 3 s on.
    expect(denied.resetS).toBeGreaterThanOrEqual(3);
    expect(denied.resetS).toBeLessThanOrEqual(4);
    const peeked = await limiter.peek('lowered', 2);
    expect(peeked.allowed).toBe(false);
    expect(peeked.resetS).toBeGreaterThanOrEqual(3);
    await new Promise((r) => setTimeout(r, 1100));
    expect((await limiter.hit('lowered', 2, 'too-early')).allowed).toBe(false);
    client.disconnect();
  }, 30_000);

  it('with Redis: 50 bursts admit exactly the limit each, and a client that waits Retry-After gets through', async () => {
    const client = await connectRedis(redis.url);
    const limiter = new RedisWindowLimiter(client, 2000);
    let overAdmits = 0;
    for (let burst = 0; burst < 50; burst++) {
      const results = await Promise.all(Array.from({ length: 15 }, (_, i) => limiter.hit(`burst-${burst}`, 10, `r${i}`)));
      overAdmits += results.filter((r) => r.allowed).length - 10;
    }
    expect(overAdmits).toBe(0);
    const denied = await limiter.hit('burst-0', 10, 'late');
    expect(denied.allowed).toBe(false);
    await new Promise((r) => setTimeout(r, denied.resetS * 1000));
    expect((await limiter.hit('burst-0', 10, 'after-wait')).allowed).toBe(true);
    client.disconnect();
  }, 30_000);

  it('two gateway instances sharing Redis hold one window', async () => {
    const { key } = await one.createKey({ rateLimitRpm: 8 });
    const statuses = await Promise.all(Array.from({ length: 12 }, (_, i) => chat(i % 2 === 0 ? one.baseA : two.baseB, key).then((r) => r.status)));
    expect(statuses.filter((s) => s === 200)).toHaveLength(8);
    expect(statuses.filter((s) => s === 429)).toHaveLength(4);
  });
});

describe('fail-open', () => {
  it('a paused Redis lets requests through marked unenforced, quickly; a restart causes no error', async () => {
    const { key } = await one.createKey({ rateLimitRpm: 1000 });
    expect((await chat(one.baseA, key)).headers.get('x-ratelimit-enforced')).toBe('true');
    redis.pause();
    try {
      const times: number[] = [];
      for (let i = 0; i < 20; i++) {
        const t = performance.now();
        const res = await chat(one.baseA, key);
        times.push(performance.now() - t);
        expect(res.status).toBe(200);
        expect(res.headers.get('x-ratelimit-enforced')).toBe('false');
      }
      // One command timeout (500 ms) opens the breaker; the rest skip Redis.
      times.sort((x, y) => x - y);
      expect(times[Math.floor(times.length / 2)]).toBeLessThan(50);
    } finally {
      redis.resume();
    }
    await redis.restart();
    // The restarted Redis has forgotten the script; the limiter reloads it by itself and enforces again.
    await eventually(async () => {
      const afterRestart = await chat(one.baseA, key);
      expect(afterRestart.status).toBe(200);
      expect(afterRestart.headers.get('x-ratelimit-enforced')).toBe('true');
    }, 5000);
  }, 30_000);

  it('requests let through unenforced count down their own window in both variants, not a fresh one each', async () => {
    const { key } = await one.createKey({ rateLimitRpm: 5 });
    expect((await chat(one.baseA, key)).headers.get('x-ratelimit-enforced')).toBe('true');
    redis.pause();
    try {
      const seen: (string | null)[][] = [];
      for (let i = 0; i < 7; i++) {
        const res = await chat(i % 2 === 0 ? one.baseA : one.baseB, key);
        expect(res.status).toBe(200);
        const reset = Number(res.headers.get('x-ratelimit-reset'));
        expect(reset).toBeGreaterThanOrEqual(1);
        expect(reset).toBeLessThanOrEqual(60);
        seen.push([res.headers.get('x-ratelimit-limit'), res.headers.get('x-ratelimit-remaining'), res.headers.get('x-ratelimit-enforced')]);
      }
      // Over the limit as far as this instance can tell, and still let through (SPEC: fail-open).
      expect(seen.map((s) => s[1])).toEqual(['4', '3', '2', '1', '0', '0', '0']);
      expect(seen.every((s) => s[0] === '5' && s[2] === 'false')).toBe(true);
    } finally {
      redis.resume();
    }
    await eventually(async () => expect((await chat(one.baseA, key)).headers.get('x-ratelimit-enforced')).toBe('true'), 5000);
  }, 30_000);

  it('a Redis that is slow for a moment (paused 200 ms under a burst) is waited for: the limit stays exact and enforced', async () => {
    const { key } = await one.createKey({ rateLimitRpm: 30 });
    redis.pause();
    const resumed = new Promise((r) => setTimeout(r, 200)).then(() => redis.resume());
    try {
      const answers = await Promise.all(Array.from({ length: 60 }, (_, i) => chat(i % 2 === 0 ? one.baseA : two.baseA, key)));
      expect(answers.filter((r) => r.status === 200)).toHaveLength(30);
      expect(answers.filter((r) => r.status === 429)).toHaveLength(30);
      expect(answers.map((r) => r.headers.get('x-ratelimit-enforced')).filter((e) => e !== 'true')).toEqual([]);
    } finally {
      await resumed;
    }
  }, 30_000);

  it('a dead Redis lets requests through marked unenforced', async () => {
    const { key } = await two.createKey({ rateLimitRpm: 1000 });
    const probe = new Redis(redis.url);
    await probe.quit();
    await redis.kill();
    try {
      for (let i = 0; i < 5; i++) {
        const res = await chat(two.baseB, key);
        expect(res.status).toBe(200);
        expect(res.headers.get('x-ratelimit-enforced')).toBe('false');
      }
    } finally {
      await redis.restart();
    }
  }, 30_000);
});
