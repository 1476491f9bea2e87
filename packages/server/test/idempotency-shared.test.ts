import { type AddressInfo, connect, createServer, type Socket } from 'node:net';
import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, type RedisServer, startPostgres, startRedis } from '@gw/testkit';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { idempotencyScope } from '../src/routing/idempotency.js';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';
import { chatBody, classify, post, usageOf } from './helpers/idempotent.js';
import { readSse, streamRequest } from './helpers/sse.js';

let redis: RedisServer;
let pg: PostgresServer;
let sim: Simulator;
let one: TestGateway;
let two: TestGateway;
let pgOne: TestGateway;
let pgTwo: TestGateway;
/** The database the instances sharing Redis use. */
let redisDb: string;
const chats = () => sim.providers.scaleway?.stats().byEndpoint.chat ?? 0;

/**
 * `first`'s answer, Redis killed while it runs upstream and restarted once it has answered: the kill waits until the
 * request is claimed and upstream (`before` chats seen until then), however long the claim takes on a busy machine.
 */
async function answeredAcrossRedisRestart<T>(first: Promise<T>, before: number, beforeKill: () => void = () => {}): Promise<T> {
  await eventually(() => expect(chats()).toBe(before + 1), 5_000);
  beforeKill();
  await redis.kill();
  try {
    return await first;
  } finally {
    await redis.restart();
  }
}

beforeAll(async () => {
  [redis, pg, sim] = await Promise.all([startRedis(), startPostgres(), startSimulator({ latencyScale: 0 })]);
  const [withRedis, withoutRedis] = await Promise.all([pg.createDatabase(), pg.createDatabase()]);
  redisDb = withRedis;
  // Two instances sharing Redis (claims and answers there) and PostgreSQL (keys, usage).
  one = await startGateway({ sim, redisUrl: redis.url, databaseUrl: withRedis });
  two = await startGateway({ sim, redisUrl: redis.url, databaseUrl: withRedis });
  // Two instances sharing only PostgreSQL: claims and answers in the store.
  pgOne = await startGateway({ sim, databaseUrl: withoutRedis });
  pgTwo = await startGateway({ sim, databaseUrl: withoutRedis });
}, 120_000);
afterAll(async () => {
  await Promise.all([one, two, pgOne, pgTwo].map((g) => g?.close()));
  await sim?.close();
  await redis?.stop();
  await pg?.stop();
});
beforeEach(() => {
  for (const p of Object.values(sim.providers)) {
    p.clearFaults();
    p.resetStats();
    p.configure({ latencyMs: 0, chunkGapMs: 0 });
  }
});

describe.each([
  ['Redis', () => [one, two] as const],
  ['PostgreSQL without Redis', () => [pgOne, pgTwo] as const],
])('two instances, idempotency in %s', (_, pair) => {
  it('20 concurrent duplicates spread over both: one upstream call, one usage record, each the identical answer or a 409 with Retry-After', async () => {
    const [a, b] = pair();
    const own = await a.createKey({ rateLimitRpm: 1000 });
    sim.providers.scaleway?.configure({ latencyMs: 300 });
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) => post((i % 2 ? b : a).baseB, own.key, chatBody(), { 'x-idempotency-key': 'shared-burst' })),
    );
    const { fresh, replays, conflicts, other } = classify(answers);
    expect(other).toEqual([]);
    expect(fresh).toHaveLength(1);
    expect(replays.length + conflicts.length).toBe(19);
    for (const r of replays) expect(r.text).toBe(fresh[0]?.text);
    expect(chats()).toBe(1);
    expect(await usageOf([a, b], own.id)).toHaveLength(1);
    // Later, either instance replays it.
    for (const gw of [a, b]) {
      const again = await post(gw.baseB, own.key, chatBody(), { 'x-idempotency-key': 'shared-burst' });
      expect([again.status, again.text, again.headers.get('idempotent-replayed')]).toEqual([200, fresh[0]?.text, 'true']);
    }
    expect(chats()).toBe(1);
  });

  it('a key given up with its answer (a stream its instance’s shutdown ended) is claimed afresh by the next request', async () => {
    const [a, b] = pair();
    const scope = `drop-test:${a.url}`;
    const first = await a.gateway.services.idempotency.begin(scope, 'fp');
    expect(first.kind).toBe('run');
    if (first.kind !== 'run') return;
    await first.claim.complete({ status: 200, headers: {}, stream: { id: 'req_00000000000000000000dd01' } });
    // Stored: a repeat would replay it.
    expect((await b.gateway.services.idempotency.backend.claim(scope, 'fp', 'someone', 60_000))?.state).toBe('done');
    await first.claim.drop();
    const next = await b.gateway.services.idempotency.begin(scope, 'fp');
    expect(next.kind).toBe('run');
    if (next.kind === 'run') await next.claim.release();
  });

  it('a stream started on one instance replays on the other', async () => {
    const [a, b] = pair();
    const own = await a.createKey({ rateLimitRpm: 1000 });
    sim.providers.scaleway?.configure({ chunkGapMs: 15 });
    const body = { ...chatBody('Stream across instances'), stream: true };
    const headers = { 'x-idempotency-key': 'shared-stream' };
    const started = await streamRequest(a.baseA, own.key, body, headers);
    const during = await streamRequest(b.baseA, own.key, body, headers);
    const first = await readSse(started);
    expect(during.headers.get('idempotent-replayed')).toBe('true');
    expect(await readSse(during)).toEqual(first);
    expect(first.at(-1)?.data).toBe('[DONE]');
    expect(chats()).toBe(1);
  });
});

/** Runs `fn` on a connection of its own to the test's Redis (the gateways' connections are not the test's to use). */
async function withAdmin(fn: (admin: Redis) => Promise<unknown>): Promise<void> {
  const admin = new Redis(redis.url);
  try {
    await fn(admin);
  } finally {
    admin.disconnect();
  }
}

/** What a restart without persistence leaves: no data, and every client's connection dropped. */
const emptyAndDropClients = () =>
  withAdmin(async (admin) => {
    await admin.flushall();
    await admin.client('KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
  });

/** A repeat of a stream on instance two replays `first` whole (once the answer is stored), with no new upstream call. */
/**
 * After a restart that emptied Redis, each instance waits up to 3 s before it claims a key Redis does not hold (the
 * others may still be writing theirs again): a fresh key answered on each instance says that wait is over.
 */
async function settledAfterRestart(): Promise<void> {
  const probe = await one.createKey({ rateLimitRpm: 1000 });
  await Promise.all(
    [one, two].map((gw, i) =>
      eventually(async () => {
        const res = await post(gw.baseA, probe.key, chatBody('Settled?'), { 'x-idempotency-key': `settled-${i}-${Date.now()}` });
        expect(res.status).toBe(200);
      }, 10_000),
    ),
  );
  sim.providers.scaleway?.resetStats();
}

async function replaysWhole(key: string, body: object, idempotencyKey: string, first: unknown): Promise<void> {
  await eventually(async () => {
    const again = await streamRequest(two.baseA, key, body, { 'x-idempotency-key': idempotencyKey });
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(await readSse(again)).toEqual(first);
  }, 10_000);
}

describe('when Redis restarts empty while keyed requests run', () => {
  it('their claims and stream answers are written again once the instances reconnect: a repeat replays, nothing runs twice', async () => {
    const own = await one.createKey({ rateLimitRpm: 1000 });
    sim.providers.scaleway?.configure({ latencyMs: 1500, chunkGapMs: 60 });
    const plain = post(one.baseA, own.key, chatBody('Runs through a restart'), { 'x-idempotency-key': 'through-restart' });
    const streamBody = { ...chatBody('Streams through a restart'), stream: true };
    const streamed = streamRequest(one.baseA, own.key, streamBody, { 'x-idempotency-key': 'stream-through-restart' });
    await new Promise((r) => setTimeout(r, 300));
    await emptyAndDropClients();
    // Reconnected (ioredis waits a moment first): the repeats wait for the first requests or replay them.
    await new Promise((r) => setTimeout(r, 700));
    const [again, streamAgain] = await Promise.all([
      post(two.baseA, own.key, chatBody('Runs through a restart'), { 'x-idempotency-key': 'through-restart' }),
      streamRequest(two.baseA, own.key, streamBody, { 'x-idempotency-key': 'stream-through-restart' }),
    ]);
    const first = await plain;
    expect(first.status).toBe(200);
    expect([again.status, again.headers.get('idempotent-replayed'), again.text]).toEqual([200, 'true', first.text]);
    const firstEvents = await readSse(await streamed);
    expect(streamAgain.headers.get('idempotent-replayed')).toBe('true');
    expect(await readSse(streamAgain)).toEqual(firstEvents);
    expect(chats()).toBe(2);
    expect(await usageOf([one, two], own.id)).toHaveLength(2);
  }, 30_000);

  it('a stream emptied from the shared buffer mid-way is stored from its instance’s own log: a repeat after its end replays it whole', async () => {
    const own = await one.createKey({ rateLimitRpm: 1000 });
    sim.providers.scaleway?.configure({ chunkGapMs: 40 });
    const body = { ...chatBody('Streams while Redis restarts'), stream: true };
    const started = await streamRequest(one.baseA, own.key, body, { 'x-idempotency-key': 'stream-gap' });
    await new Promise((r) => setTimeout(r, 250));
    await emptyAndDropClients();
    const first = await readSse(started);
    expect(first.at(-1)?.data).toBe('[DONE]');
    await replaysWhole(own.key, body, 'stream-gap', first);
    expect(chats()).toBe(1);
  }, 30_000);

  it('a stream that began while Redis was down is still stored with its events: a repeat after its end replays it whole', async () => {
    await settledAfterRestart();
    const own = await one.createKey({ rateLimitRpm: 1000 });
    sim.providers.scaleway?.configure({ latencyMs: 500, chunkGapMs: 40 });
    const body = { ...chatBody('Begins while Redis is down'), stream: true };
    const streamed = streamRequest(one.baseA, own.key, body, { 'x-idempotency-key': 'began-unstored' });
    await new Promise((r) => setTimeout(r, 200));
    await redis.kill();
    // The stream begins (its begun answer cannot be stored), then Redis comes back empty.
    const started = await streamed;
    await redis.restart();
    const first = await readSse(started);
    expect(first.at(-1)?.data).toBe('[DONE]');
    // Later than the resume buffer keeps a stream its client received whole (10 s): only the stored answer is left.
    const streamId = started.headers.get('x-request-id') as string;
    await new Promise((r) => setTimeout(r, 500));
    await withAdmin((admin) => admin.del(`gw:stream:{${streamId}}:events`, `gw:stream:{${streamId}}:meta`));
    await replaysWhole(own.key, body, 'began-unstored', first);
    expect(chats()).toBe(1);
  }, 30_000);

  it('an answer whose write failed (Redis down as the request ended) is written once Redis is back: the repeat replays it', async () => {
    await settledAfterRestart();
    const own = await one.createKey({ rateLimitRpm: 1000 });
    sim.providers.scaleway?.configure({ latencyMs: 600 });
    const before = chats();
    const first = post(one.baseA, own.key, chatBody('Ends while Redis is down'), { 'x-idempotency-key': 'lost-write' });
    const answered = await answeredAcrossRedisRestart(first, before);
    expect(answered.status).toBe(200);
    // Written by instance one once it has reconnected. A repeat that reached the emptied Redis before that would find
    // nothing and run again (the window docs/routing.md names, until the reconnect); here it comes after.
    const stored = `gw:idem:{${idempotencyScope(own.id, 'lost-write')}}`;
    await eventually(() => withAdmin(async (admin) => expect(await admin.hget(stored, 'state')).toBe('done')), 10_000);
    await eventually(async () => {
      const again = await post(two.baseA, own.key, chatBody('Ends while Redis is down'), { 'x-idempotency-key': 'lost-write' });
      expect([again.status, again.headers.get('idempotent-replayed'), again.text]).toEqual([200, 'true', answered.text]);
    }, 10_000);
    expect(chats()).toBe(1);
  }, 30_000);
});

/**
 * A TCP relay in front of Redis for one instance: while closed, it takes connections and drops them at once, so that
 * instance stays away from Redis longer than the others.
 */
async function redisRelay(port: number): Promise<{ url: string; open: boolean; close(): Promise<void> }> {
  const pairs = new Set<Socket>();
  const relay = {
    url: '',
    open: true,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of pairs) s.destroy();
        server.close(() => resolve());
      }),
  };
  const server = createServer((client) => {
    if (!relay.open) return void client.destroy();
    const upstream = connect(port, '127.0.0.1');
    pairs.add(client);
    pairs.add(upstream);
    const end = () => {
      client.destroy();
      upstream.destroy();
      pairs.delete(client);
      pairs.delete(upstream);
    };
    client.on('error', end).on('close', end).pipe(upstream);
    upstream.on('error', end).on('close', end).pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  relay.url = `redis://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return relay;
}

describe('when Redis restarts empty and the instance that ran a keyed request reconnects last', () => {
  it('a repeat on an instance already back waits for that answer rather than finding no claim and running again', async () => {
    const relay = await redisRelay(redis.port);
    const late = await startGateway({ sim, redisUrl: relay.url, databaseUrl: redisDb });
    const idem = (gw: TestGateway) => (gw.gateway.services.idempotency.backend as unknown as { redis: Redis }).redis;
    try {
      const own = await late.createKey({ rateLimitRpm: 1000 });
      sim.providers.scaleway?.configure({ latencyMs: 600 });
      const first = post(late.baseA, own.key, chatBody('Reconnects last'), { 'x-idempotency-key': 'reconnects-last' });
      const answered = await answeredAcrossRedisRestart(first, 0, () => {
        relay.open = false;
      });
      expect(answered.status).toBe(200);
      // Instance two is back (its idempotency connection ready); the one that ran the request is not.
      await eventually(() => expect(idem(two).status).toBe('ready'), 10_000);
      expect(idem(late).status).not.toBe('ready');
      const again = post(two.baseA, own.key, chatBody('Reconnects last'), { 'x-idempotency-key': 'reconnects-last' });
      await new Promise((r) => setTimeout(r, 100));
      relay.open = true;
      const repeat = await again;
      expect([repeat.status, repeat.headers.get('idempotent-replayed'), repeat.text]).toEqual([200, 'true', answered.text]);
      expect(chats()).toBe(1);
    } finally {
      await late.close();
      await relay.close();
    }
  }, 30_000);
});

describe('when Redis restarts from a snapshot taken while a keyed request ran', () => {
  const idem = (gw: TestGateway) => (gw.gateway.services.idempotency.backend as unknown as { redis: Redis }).redis;

  /** `first` upstream (`before` chats seen until then), a snapshot saved, then `afterSave` before Redis is killed and restarted from it. */
  async function restartFromSnapshot(before: number, afterSave: () => Promise<void>): Promise<void> {
    await eventually(() => expect(chats()).toBe(before + 1), 5_000);
    await withAdmin((admin) => admin.save());
    await afterSave();
    await redis.kill();
    await redis.restart();
    await eventually(() => expect(idem(two).status).toBe('ready'), 10_000);
  }

  afterEach(async () => {
    // Later restarts start empty again: the snapshot left is an empty one.
    await withAdmin(async (admin) => {
      await admin.flushall();
      await admin.save();
    });
  });

  it('a claim of a request that ended since (its answer lost with the run that had it) holds its key no longer than the restart settles: the repeat runs', async () => {
    await settledAfterRestart();
    const own = await one.createKey({ rateLimitRpm: 1000 });
    sim.providers.scaleway?.configure({ latencyMs: 600 });
    const before = chats();
    const first = post(one.baseA, own.key, chatBody('Ended after the snapshot'), { 'x-idempotency-key': 'ended-after-snapshot' });
    await restartFromSnapshot(before, async () => {
      expect((await first).status).toBe(200);
    });
    const stored = `gw:idem:{${idempotencyScope(own.id, 'ended-after-snapshot')}}`;
    await withAdmin(async (admin) => expect(await admin.hget(stored, 'state')).toBe('pending'));
    // Before, the repeat waited its 10 s and got a 409, and so did every retry until the claim ran out (60 s).
    const started = Date.now();
    const again = await post(two.baseA, own.key, chatBody('Ended after the snapshot'), { 'x-idempotency-key': 'ended-after-snapshot' });
    expect(again.status).toBe(200);
    expect(Date.now() - started).toBeLessThan(6_000);
    expect(chats()).toBe(before + 2);
  }, 30_000);

  it('a claim whose request still runs is written again by its instance: the repeat waits for it and replays it, nothing runs twice', async () => {
    await settledAfterRestart();
    const own = await one.createKey({ rateLimitRpm: 1000 });
    sim.providers.scaleway?.configure({ latencyMs: 5_000 });
    const before = chats();
    const first = post(one.baseA, own.key, chatBody('Runs through the snapshot'), { 'x-idempotency-key': 'runs-through-snapshot' });
    await restartFromSnapshot(before, async () => {});
    const again = await post(two.baseA, own.key, chatBody('Runs through the snapshot'), { 'x-idempotency-key': 'runs-through-snapshot' });
    const answered = await first;
    expect(answered.status).toBe(200);
    expect([again.status, again.headers.get('idempotent-replayed'), again.text]).toEqual([200, 'true', answered.text]);
    expect(chats()).toBe(before + 1);
  }, 30_000);
});

describe('when Redis cannot be reached', () => {
  it('a request with a key is refused with 503 service_unavailable and Retry-After (never run unguarded); others still run', async () => {
    const own = await one.createKey({ rateLimitRpm: 1000 });
    redis.pause();
    try {
      const started = Date.now();
      const refused = await post(one.baseA, own.key, chatBody(), { 'x-idempotency-key': 'no-redis' });
      expect([refused.status, JSON.parse(refused.text).error.code, refused.headers.get('retry-after')]).toEqual([503, 'service_unavailable', '1']);
      expect(Date.now() - started).toBeLessThan(4000);
      const refusedB = await post(one.baseB, own.key, chatBody(), { 'x-idempotency-key': 'no-redis' });
      expect(refusedB.status).toBe(503);
      expect((await post(one.baseA, own.key, chatBody())).status).toBe(200);
      expect(chats()).toBe(1);
    } finally {
      redis.resume();
    }
  });
});
