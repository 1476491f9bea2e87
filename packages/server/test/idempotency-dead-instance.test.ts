import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, type RedisServer, startPostgres, startRedis } from '@gw/testkit';
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';
import { chatBody, post, usageOf } from './helpers/idempotent.js';
import { spawnGateway } from './helpers/process.js';

let redis: RedisServer;
let pg: PostgresServer;
let sim: Simulator;
let databaseUrl: string;
let one: TestGateway;
let two: TestGateway;
const scaleway = () => sim.providers.scaleway;
const chats = () => scaleway()?.stats().byEndpoint.chat ?? 0;

beforeAll(async () => {
  [redis, pg, sim] = await Promise.all([startRedis(), startPostgres(), startSimulator({ latencyScale: 0 })]);
  databaseUrl = await pg.createDatabase();
  one = await startGateway({ sim, redisUrl: redis.url, databaseUrl });
  two = await startGateway({ sim, redisUrl: redis.url, databaseUrl });
}, 120_000);
afterAll(async () => {
  await Promise.all([one, two].map((g) => g?.close()));
  await sim?.close();
  await redis?.stop();
  await pg?.stop();
});
beforeEach(() => {
  scaleway()?.clearFaults();
  scaleway()?.resetStats();
  scaleway()?.configure({ latencyMs: 0, chunkGapMs: 0 });
});

/** A third instance, in a process of its own, holding a keyed request upstream when it is killed with SIGKILL. */
async function killedMidRequest(key: string, idempotencyKey: string): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'gw-dead-claim-'));
  writeFileSync(join(dir, 'gw.json'), JSON.stringify(sim.demoConfig()));
  const doomed = await spawnGateway({ GW_CONFIG: join(dir, 'gw.json'), GW_DATA_DIR: join(dir, 'data'), REDIS_URL: redis.url, DATABASE_URL: databaseUrl });
  try {
    scaleway()?.configure({ latencyMs: 30_000 });
    const held = post(`${doomed.url}/alt/v1`, key, chatBody(), { 'x-idempotency-key': idempotencyKey }).catch(() => null);
    await eventually(() => expect(scaleway()?.stats().inFlight).toBe(1), 10_000);
    doomed.child.kill('SIGKILL');
    await doomed.exited;
    expect(await held).toBeNull();
  } finally {
    scaleway()?.configure({ latencyMs: 0 });
    if (doomed.child.exitCode === null) doomed.child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('a keyed request whose instance was killed mid-request (Redis and PostgreSQL shared)', () => {
  it("is run by the SDK's retry on another instance within seconds, not refused with 409 for the claim's 60 s; billed once", async () => {
    const own = await one.createKey({ rateLimitRpm: 1000 });
    await killedMidRequest(own.key, 'killed-mid-request');
    const before = chats();
    const started = Date.now();
    // The official SDK with its default retries (2), as a client of the killed instance would retry through a load balancer.
    const client = new OpenAI({ apiKey: own.key, baseURL: one.baseB });
    const res = await client.chat.completions
      .create(chatBody() as OpenAI.ChatCompletionCreateParamsNonStreaming, { headers: { 'X-Idempotency-Key': 'killed-mid-request' } })
      .withResponse();
    // The killed instance's word that it is alive lasts up to 6 s; the repeat waits for it, then runs.
    expect(Date.now() - started).toBeLessThan(15_000);
    expect(res.response.status).toBe(200);
    expect(res.response.headers.get('idempotent-replayed')).toBeNull();
    expect(res.data.choices[0]?.message.content).toBeTruthy();
    expect(chats() - before).toBe(1);
    // The killed request's record died with it: only the retry is billed.
    expect(await usageOf([one, two], own.id)).toHaveLength(1);
    // And the key now replays that answer on either instance.
    for (const gw of [one, two]) {
      const again = await post(gw.baseB, own.key, chatBody(), { 'x-idempotency-key': 'killed-mid-request' });
      expect([again.status, again.headers.get('idempotent-replayed')]).toEqual([200, 'true']);
      expect(JSON.parse(again.text).id).toBe(res.data.id);
    }
    expect(chats() - before).toBe(1);
  }, 90_000);

  it('two concurrent retries on two instances: one takes the claim over and runs, the other replays its answer', async () => {
    const own = await one.createKey({ rateLimitRpm: 1000 });
    await killedMidRequest(own.key, 'killed-two-retries');
    const before = chats();
    scaleway()?.configure({ latencyMs: 300 });
    const answers = await Promise.all([one, two].map((gw) => post(gw.baseB, own.key, chatBody(), { 'x-idempotency-key': 'killed-two-retries' })));
    expect(answers.map((a) => a.status)).toEqual([200, 200]);
    expect(answers.map((a) => a.headers.get('idempotent-replayed')).sort()).toEqual(['true', null].sort());
    expect(answers[0]?.text).toBe(answers[1]?.text);
    expect(chats() - before).toBe(1);
    expect(await usageOf([one, two], own.id)).toHaveLength(1);
  }, 90_000);

  it('a live instance’s claim is never taken over, its request running longer than an instance’s word that it is alive (6 s)', async () => {
    const own = await one.createKey({ rateLimitRpm: 1000 });
    scaleway()?.configure({ latencyMs: 8_000 });
    const first = post(one.baseB, own.key, chatBody(), { 'x-idempotency-key': 'slow-live' });
    await eventually(() => expect(scaleway()?.stats().inFlight).toBe(1), 5_000);
    const repeat = await post(two.baseB, own.key, chatBody(), { 'x-idempotency-key': 'slow-live' });
    const answer = await first;
    expect([answer.status, repeat.status, repeat.headers.get('idempotent-replayed')]).toEqual([200, 200, 'true']);
    expect(repeat.text).toBe(answer.text);
    expect(chats()).toBe(1);
    expect(await usageOf([one, two], own.id)).toHaveLength(1);
  }, 60_000);
});
