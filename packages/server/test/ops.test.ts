import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Simulator, startSimulator } from '@gw/simulator';
import { type RedisServer, startRedis } from '@gw/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStore } from '../src/store/open.js';
import { ADMIN_TOKEN, eventually } from './helpers/gateway.js';
import { type GatewayProcess, spawnGateway } from './helpers/process.js';
import { exchange } from './helpers/raw-http.js';

let sim: Simulator;
let proc: GatewayProcess;
let dataDir: string;

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  const dir = mkdtempSync(join(tmpdir(), 'gw-ops-'));
  dataDir = join(dir, 'data');
  const config = sim.demoConfig();
  // The provider key reaches the gateway only through an ${ENV} reference.
  const scaleway = sim.providers.scaleway;
  for (const p of config.providers) if (p.id === 'scaleway') p.apiKey = ['$', '{SCW_KEY}'].join('');
  writeFileSync(join(dir, 'gw.json'), JSON.stringify(config));
  proc = await spawnGateway({ GW_CONFIG: join(dir, 'gw.json'), GW_DATA_DIR: dataDir, GW_ADMIN_TOKEN: ADMIN_TOKEN, SCW_KEY: scaleway?.apiKey ?? '' });
}, 60_000);

afterAll(async () => {
  if (proc && proc.child.exitCode === null) proc.child.kill('SIGKILL');
  await sim?.close();
});

describe('operations', () => {
  it('prints the first API key once, where to point a client, and as many models as GET /v1/models lists', async () => {
    const key = /Created the first API key \(shown once, keep it\): (gw_live_[A-Za-z0-9_-]{43})/.exec(proc.output())?.[1];
    expect(key).toBeDefined();
    expect(proc.output()).toContain(`${proc.url}/v1`);
    expect(proc.output()).toContain(`${proc.url}/alt/v1`);
    const listed = ((await (await fetch(`${proc.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } })).json()) as { data: unknown[] }).data;
    const retired = sim.demoConfig().models.filter((m) => m.deprecated === true).length;
    expect(retired).toBeGreaterThan(0);
    expect(proc.output()).toContain(`: ${listed.length} models (and ${retired} retired)`);
  });

  it('serves /healthz, /readyz and Prometheus /metrics', async () => {
    expect((await fetch(`${proc.url}/healthz`)).status).toBe(200);
    const ready = await fetch(`${proc.url}/readyz`);
    expect(ready.status).toBe(200);
    // No Redis configured: nothing to be unreachable.
    expect(await ready.json()).toMatchObject({ status: 'ready', store: 'ok', redis: 'none' });
    const metrics = await (await fetch(`${proc.url}/metrics`)).text();
    expect(metrics).toContain('gw_http_requests_total');
    expect(metrics).toContain('gw_process_resident_memory_bytes');
  });

  it("names in a request's end line its model, the provider that answered it (after a failover, of a stream too) and its error code", async () => {
    const key = /gw_live_[A-Za-z0-9_-]{43}/.exec(proc.output())?.[0] as string;
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    const chat = async (base: string, body: Record<string, unknown>, extra: Record<string, string> = {}) => {
      const res = await fetch(`${proc.url}${base}/chat/completions`, {
        method: 'POST',
        headers: { ...headers, ...extra },
        body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 5, ...body }),
      });
      await res.text();
      return res.headers.get('x-request-id') as string;
    };
    const end = (requestId: string) =>
      proc
        .output()
        .split('\n')
        .filter((l) => l.includes(`"reqId":"${requestId}"`) && l.includes('"msg":"request completed'))
        .map((l) => (JSON.parse(l) as { res: Record<string, unknown> }).res);
    sim.providers.scaleway?.setFault({ kind: 'status', status: 503, times: 1 });
    const failedOver = await chat('/v1', { model: 'mistral/small' }, { 'x-gateway-provider-prefer': 'scaleway' });
    const streamed = await chat('/alt/v1', { model: 'meta/llama-3.3-70b', stream: true }, { 'x-gateway-provider': 'nebius' });
    const unknown = await chat('/v1', { model: 'nobody/nothing' });
    await eventually(() => expect([failedOver, streamed, unknown].map((id) => end(id).length)).toEqual([1, 1, 1]));
    const [first] = end(failedOver);
    expect(first).toMatchObject({ statusCode: 200, model: 'mistral/small' });
    expect(first?.provider).not.toBe('scaleway');
    expect(first?.code).toBeUndefined();
    expect(end(streamed)[0]).toMatchObject({ statusCode: 200, model: 'meta/llama-3.3-70b', provider: 'nebius' });
    expect(end(unknown)[0]).toMatchObject({ statusCode: 404, code: 'model_not_found' });
  });

  it('counts in /metrics the streams that write their own answer and the requests whose client left (as 499)', async () => {
    const key = /gw_live_[A-Za-z0-9_-]{43}/.exec(proc.output())?.[0] as string;
    const count = async (status: number) => {
      const text = await (await fetch(`${proc.url}/metrics`)).text();
      const line = text.split('\n').find((l) => l.startsWith(`gw_http_requests_total{route="/v1/chat/completions",variant="a",status="${status}"}`));
      return Number(line?.split(' ').at(-1) ?? 0);
    };
    const [ok, gone] = [await count(200), await count(499)];
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    const stream = await fetch(`${proc.url}/v1/chat/completions`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'stream' }], stream: true }),
    });
    await stream.text();
    sim.providers.scaleway?.setFault({ kind: 'latency', ms: 1000, times: 1 });
    const leaving = new AbortController();
    const left = fetch(`${proc.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...headers, 'x-gateway-provider': 'scaleway' },
      body: JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'never mind' }] }),
      signal: leaving.signal,
    }).catch(() => null);
    await new Promise((r) => setTimeout(r, 200));
    leaving.abort();
    await left;
    await new Promise((r) => setTimeout(r, 100));
    expect(await count(200)).toBe(ok + 1);
    expect(await count(499)).toBe(gone + 1);
    // Its log ends as every request's does, with the status the metrics give it (Fastify's own line needs a finished answer).
    const ended = proc
      .output()
      .split('\n')
      .filter((l) => l.includes('"statusCode":499') && l.includes('"msg":"request completed: the client left before its answer"'));
    expect(ended.length).toBe(gone + 1);
    expect(JSON.parse(ended.at(-1) as string).responseTime).toBeGreaterThan(150);
    sim.providers.scaleway?.clearFaults();
  });

  it('logs a stream whose client left after some of its events as a client that left during its answer, not before it', async () => {
    const key = /gw_live_[A-Za-z0-9_-]{43}/.exec(proc.output())?.[0] as string;
    const streamsOpen = async () =>
      Number(
        (await (await fetch(`${proc.url}/metrics`)).text())
          .split('\n')
          .find((l) => l.startsWith('gw_streams_open '))
          ?.split(' ')[1],
      );
    sim.providers.scaleway?.configure({ chunkGapMs: 30 });
    try {
      const leaving = new AbortController();
      const res = await fetch(`${proc.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-gateway-provider': 'scaleway' },
        body: JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'a long story please' }], stream: true, max_tokens: 20 }),
        signal: leaving.signal,
      });
      const requestId = res.headers.get('x-request-id') as string;
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      const decoder = new TextDecoder();
      let received = '';
      while ((received.match(/^data: \{/gm) ?? []).length < 3) received += decoder.decode((await reader.read()).value, { stream: true });
      leaving.abort();
      const ends = () =>
        proc
          .output()
          .split('\n')
          .filter((l) => l.includes(`"reqId":"${requestId}"`) && l.includes('"msg":"request completed'))
          .map((l) => JSON.parse(l) as { res: { statusCode: number }; msg: string });
      await eventually(() => expect(ends()).toHaveLength(1));
      // Still the 499 the metrics count, but said as it happened: the client had events of its answer.
      expect(ends()[0]).toMatchObject({ res: { statusCode: 499 }, msg: 'request completed: the client left during its answer, part of it sent' });
      // The stream runs on to its end without a reader; the tests after this one expect none open.
      await eventually(async () => expect(await streamsOpen()).toBe(0));
    } finally {
      sim.providers.scaleway?.configure({ chunkGapMs: 0 });
    }
  });

  it('counts as 499, not 400, a request whose client left while its body (JSON or an upload) was arriving', async () => {
    const key = /gw_live_[A-Za-z0-9_-]{43}/.exec(proc.output())?.[0] as string;
    const port = Number(new URL(proc.url).port);
    const count = async (route: string, status: number) => {
      const text = await (await fetch(`${proc.url}/metrics`)).text();
      const line = text.split('\n').find((l) => l.startsWith(`gw_http_requests_total{route="${route}",variant="a",status="${status}"}`));
      return Number(line?.split(' ').at(-1) ?? 0);
    };
    const boundary = 'cut-off-upload';
    const upload = Buffer.concat([
      Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nopenai/whisper-large-v3\r\n`),
      Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\n`),
      Buffer.alloc(64 * 1024, 1),
      Buffer.from(`\r\n--${boundary}--\r\n`),
    ]);
    const json = Buffer.from(JSON.stringify({ model: 'mistral/small', messages: [{ role: 'user', content: 'x'.repeat(8000) }] }));
    const cases = [
      { route: '/v1/chat/completions', type: 'application/json', body: json },
      { route: '/v1/audio/transcriptions', type: `multipart/form-data; boundary=${boundary}`, body: upload },
    ];
    for (const { route, type, body } of cases) {
      const [refused, gone] = [await count(route, 400), await count(route, 499)];
      const logged = proc
        .output()
        .split('\n')
        .filter((l) => l.includes('"msg":"request completed: the client left before its answer"')).length;
      // Half the declared body, then the connection closed: the client gave up on its request.
      await new Promise<void>((resolve, reject) => {
        const socket = connect(port, '127.0.0.1', () => {
          socket.write(
            `POST ${route} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${key}\r\ncontent-type: ${type}\r\ncontent-length: ${body.length}\r\n\r\n`,
          );
          socket.write(body.subarray(0, body.length >> 1), () => setTimeout(() => socket.destroy(), 50));
        });
        socket.on('close', () => resolve());
        socket.on('error', reject);
      });
      await eventually(async () => expect(await count(route, 499)).toBe(gone + 1));
      expect(await count(route, 400)).toBe(refused);
      const ended = proc
        .output()
        .split('\n')
        .filter((l) => l.includes('"msg":"request completed: the client left before its answer"'));
      expect(ended.length).toBe(logged + 1);
    }
  });

  it('labels in /metrics the variant of answers refused before its routes (a 404 under /alt/v1, a missing Host)', async () => {
    const count = async (route: string, variant: string, status: number) => {
      const text = await (await fetch(`${proc.url}/metrics`)).text();
      const line = text.split('\n').find((l) => l.startsWith(`gw_http_requests_total{route="${route}",variant="${variant}",status="${status}"}`));
      return Number(line?.split(' ').at(-1) ?? 0);
    };
    const [missing, noHost] = [await count('unmatched', 'b', 404), await count('/alt/v1/models', 'b', 400)];
    const key = /gw_live_[A-Za-z0-9_-]{43}/.exec(proc.output())?.[0] as string;
    expect((await fetch(`${proc.url}/alt/v1/no-such-route`, { headers: { authorization: `Bearer ${key}` } })).status).toBe(404);
    const port = Number(new URL(proc.url).port);
    const answer = await exchange(port, 'GET /alt/v1/models HTTP/1.1\r\nconnection: close\r\n\r\n');
    expect(answer).toMatch(/^HTTP\/1.1 400 /);
    await new Promise((r) => setTimeout(r, 100));
    expect([await count('unmatched', 'b', 404), await count('/alt/v1/models', 'b', 400)]).toEqual([missing + 1, noHost + 1]);
  });

  it('shows in /metrics the streams open, their memory, the requests in flight and the usage records pending', async () => {
    const key = /gw_live_[A-Za-z0-9_-]{43}/.exec(proc.output())?.[0] as string;
    const read = async () => {
      const text = await (await fetch(`${proc.url}/metrics`)).text();
      const value = (series: string) =>
        Number(
          text
            .split('\n')
            .find((l) => l.startsWith(`${series} `))
            ?.split(' ')[1] ?? Number.NaN,
        );
      return {
        streams: value('gw_streams_open'),
        memory: value('gw_stream_memory_bytes'),
        inFlight: value('gw_requests_in_flight'),
        pending: value('gw_usage_records_pending'),
        reclaimed: value('gw_stream_memory_reclaims_total{what="stream"}'),
      };
    };
    const before = await read();
    expect(before).toMatchObject({ streams: 0, reclaimed: 0 });
    sim.providers.scaleway?.setFault({ kind: 'stall', afterChunks: 2, ms: 1500, times: 1 });
    const stream = await fetch(`${proc.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-gateway-provider': 'scaleway' },
      body: JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'hold on' }], stream: true }),
    });
    const reader = (stream.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    const during = await read();
    expect(during.streams).toBe(1);
    expect(during.memory).toBeGreaterThan(before.memory);
    // This scrape and the stream.
    expect(during.inFlight).toBeGreaterThanOrEqual(2);
    while (!(await reader.read()).done) {}
    await eventually(async () => expect((await read()).streams).toBe(0));
    // Its record is written within the 500 ms flush interval.
    await eventually(async () => expect((await read()).pending).toBe(0));
    sim.providers.scaleway?.clearFaults();
  });

  it('keeps keys and secrets out of the logs, and drains in-flight work on SIGTERM', async () => {
    const key = /gw_live_[A-Za-z0-9_-]{43}/.exec(proc.output())?.[0] as string;
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    const body = JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'slow one' }] });
    expect((await fetch(`${proc.url}/v1/chat/completions`, { method: 'POST', headers, body })).status).toBe(200);
    await fetch(`${proc.url}/v1/models`, { headers: { authorization: 'Bearer gw_live_wrong' } });
    // A key put in a query string (not a way to authenticate) stays out of the logged URL too, however it is written,
    // and so does the admin token; a key id, which opens nothing, stays in to say which key an admin call touched.
    await fetch(`${proc.url}/v1/models?api_key=${key}`);
    await fetch(`${proc.url}/v1/models?Authorization=Bearer%20${key}`);
    await fetch(`${proc.url}/v1/models?k=x${key}`);
    const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };
    const created = (await (await fetch(`${proc.url}/admin/v1/keys`, { method: 'POST', headers: admin })).json()) as { id: string };
    await fetch(`${proc.url}/admin/v1/keys/${created.id}?access_token=${ADMIN_TOKEN}`, { headers: admin });
    // The Host a client sends is logged with each request: a key or the admin token put there stays out too.
    const port = Number(new URL(proc.url).port);
    await exchange(port, `GET /v1/models HTTP/1.1\r\nHost: ${key}\r\nConnection: close\r\n\r\n`);
    await exchange(port, `GET /healthz HTTP/1.1\r\nHost: ${ADMIN_TOKEN}:8080\r\nConnection: close\r\n\r\n`);
    // A provider failing after its first chunk (no failover then) is logged as any failed attempt is.
    sim.providers.scaleway?.setFault({ kind: 'error_after_200', afterChunks: 2 });
    const cut = await fetch(`${proc.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...headers, 'x-gateway-provider': 'scaleway' },
      body: JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'cut' }], stream: true }),
    });
    expect(await cut.text()).toContain('failed mid-stream');
    sim.providers.scaleway?.clearFaults();
    // An upload its client cuts off half-way is the client's leaving, not a fault of the gateway's to log as one.
    await new Promise<void>((resolve) => {
      const socket = connect(Number(new URL(proc.url).port), '127.0.0.1');
      socket.on('error', () => {});
      socket.write(
        `POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: multipart/form-data; boundary=b\r\n` +
          'Content-Length: 100000\r\n\r\n--b\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\nRIFF',
      );
      setTimeout(() => {
        socket.resetAndDestroy();
        setTimeout(resolve, 200);
      }, 200);
    });

    // A stream with an idempotency key whose client leaves before its first event goes on for the retry: no fault either.
    sim.providers.scaleway?.setFault({ kind: 'slow_first_byte', ms: 400, times: 1 });
    const early = { ...headers, 'x-gateway-provider': 'scaleway', 'x-idempotency-key': 'ops-left-early' };
    const streamBody = JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'left early' }], stream: true });
    const gone = fetch(`${proc.url}/v1/chat/completions`, { method: 'POST', headers: early, body: streamBody, signal: AbortSignal.timeout(100) });
    await expect(gone).rejects.toThrow();
    const retry = await fetch(`${proc.url}/v1/chat/completions`, { method: 'POST', headers: early, body: streamBody });
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(await retry.text()).toContain('data: [DONE]');

    sim.providers.scaleway?.setFault({ kind: 'latency', ms: 1500 });
    const inFlight = fetch(`${proc.url}/v1/chat/completions`, { method: 'POST', headers, body });
    await new Promise((r) => setTimeout(r, 300));
    proc.child.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 100));
    // A second signal does not cut the drain short.
    proc.child.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 100));
    const late = await fetch(`${proc.url}/healthz`).then(
      (r) => r.status,
      () => 'refused',
    );
    expect([503, 'refused']).toContain(late);
    const res = await inFlight;
    expect(res.status).toBe(200);
    const requestId = res.headers.get('x-request-id') as string;
    expect(await proc.exited).toBe(0);

    const logs = proc
      .output()
      .replace(/Created the first API key.*\n/, '')
      .replace(/Try: curl.*\n/, '');
    expect(logs).not.toContain(key);
    expect(logs).not.toContain(key.slice(8));
    expect(logs).not.toContain(ADMIN_TOKEN);
    expect(logs).not.toContain(sim.providers.scaleway?.apiKey as string);
    expect(logs).toContain(`/admin/v1/keys/${created.id}?access_token=[redacted]`);
    expect(logs).toMatch(/"provider":"scaleway".*"msg":"upstream failed mid-stream: /);
    expect(logs).not.toContain('"msg":"unhandled error"');
    expect(logs).toMatch(/"msg":"draining/);
    expect(logs).toMatch(/"msg":"already draining; the signal is ignored"/);

    // The usage of the drained request was written before the process exited.
    const store = await openStore({ dataDir });
    try {
      expect(await store.usage.list({ requestId })).toHaveLength(1);
    } finally {
      await store.close();
    }
  }, 30_000);
});

/** Runs `fn` on a gateway process of its own with a Redis of its own (both stopped after, whatever `fn` did to them). */
async function withRedisGateway(fn: (gw: GatewayProcess, redis: RedisServer) => Promise<void>): Promise<void> {
  const redis = await startRedis();
  const dir = mkdtempSync(join(tmpdir(), 'gw-ops-redis-'));
  writeFileSync(join(dir, 'gw.json'), JSON.stringify(sim.demoConfig()));
  const gw = await spawnGateway({ GW_CONFIG: join(dir, 'gw.json'), GW_DATA_DIR: join(dir, 'data'), REDIS_URL: redis.url });
  try {
    await fn(gw, redis);
  } finally {
    redis.resume();
    if (gw.child.exitCode === null) {
      gw.child.kill('SIGKILL');
      await gw.exited;
    }
    await redis.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('readiness with Redis', () => {
  it(
    'an idle gateway reports a stalled Redis at once, not when its connection drops seconds later',
    () =>
      withRedisGateway(async (gw, redis) => {
        expect(await (await fetch(`${gw.url}/readyz`)).json()).toMatchObject({ redis: 'ok' });
        redis.pause();
        const asked = Date.now();
        expect(await (await fetch(`${gw.url}/readyz`)).json()).toMatchObject({ status: 'ready', redis: 'unreachable' });
        expect(Date.now() - asked).toBeLessThan(2000);
        redis.resume();
        await eventually(async () => expect(await (await fetch(`${gw.url}/readyz`)).json()).toMatchObject({ redis: 'ok' }), 10_000);
      }),
    30_000,
  );
});

describe('stopping with Redis', () => {
  it(
    'a clean stop closes its own Redis connections without reporting Redis as unreachable',
    () =>
      withRedisGateway(async (gw) => {
        expect(await (await fetch(`${gw.url}/readyz`)).json()).toMatchObject({ redis: 'ok' });
        gw.child.kill('SIGTERM');
        expect(await gw.exited).toBe(0);
        expect(gw.output()).toMatch(/"msg":"stopped"/);
        expect(gw.output()).not.toContain('redis unreachable');
      }),
    30_000,
  );
});

describe('a Redis that refuses the gateway', () => {
  it('a wrong Redis password is logged as the reason Redis is unreachable, the password not shown', async () => {
    const redis = await startRedis();
    const client = new Redis(redis.url);
    const dir = mkdtempSync(join(tmpdir(), 'gw-ops-redis-auth-'));
    let gw: GatewayProcess | undefined;
    try {
      await client.config('SET', 'requirepass', 'Right-Redis-Pass-1');
      writeFileSync(join(dir, 'gw.json'), JSON.stringify(sim.demoConfig()));
      const wrong = redis.url.replace('redis://', 'redis://:Wrong-Redis-Pass-2@');
      gw = await spawnGateway({ GW_CONFIG: join(dir, 'gw.json'), GW_DATA_DIR: join(dir, 'data'), REDIS_URL: wrong });
      const running = gw;
      await eventually(async () => expect(running.output()).toMatch(/"message":"WRONGPASS[^"]*"[^\n]*"msg":"redis unreachable/), 10_000);
      expect(await (await fetch(`${gw.url}/readyz`)).json()).toMatchObject({ redis: 'unreachable' });
      expect(gw.output()).not.toContain('Wrong-Redis-Pass-2');
      // What it says of revocations is what the instance does while deaf (README: re-read within 250 ms), not the cache's 30 s.
      expect(gw.output()).toMatch(/"msg":"redis unreachable: [^"]*changes \(revocations included\) reach this instance within about 250 ms/);
    } finally {
      client.disconnect();
      if (gw && gw.child.exitCode === null) {
        gw.child.kill('SIGKILL');
        await gw.exited;
      }
      await redis.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 30_000);
});
