import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, startPostgres } from '@gw/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';

let pg: PostgresServer;
let sim: Simulator;
let one: TestGateway;
let two: TestGateway;
let database: string;

// Instances sharing PostgreSQL without Redis: no shared resume buffer, a stream's events reach another instance only
// with its stored answer. The wait is short so that a repeat waiting in vain ends within the test.
const env = { GW_IDEMPOTENCY_KEPT_MB: '1', GW_IDEMPOTENCY_WAIT_MS: '1000' };

beforeAll(async () => {
  [pg, sim] = await Promise.all([startPostgres(), startSimulator({ latencyScale: 0 })]);
  const databaseUrl = await pg.createDatabase();
  database = new URL(databaseUrl).pathname.slice(1);
  one = await startGateway({ sim, databaseUrl, env });
  two = await startGateway({ sim, databaseUrl, env });
}, 60_000);

afterAll(async () => {
  await Promise.all([one?.close(), two?.close()]);
  await Promise.all([sim?.close(), pg?.stop()]);
});

const body = { model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'A long answer' }], stream: true };
const keyed = (base: string, key: string, idempotencyKey = 'long-stream') =>
  fetch(`${base}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-idempotency-key': idempotencyKey },
    body: JSON.stringify(body),
  });

describe('a keyed stream past GW_IDEMPOTENCY_KEPT_MB on instances sharing PostgreSQL only', () => {
  it('is a 422 saying its answer was not kept on the other instance, not a 409 "still in progress" for 24 hours', async () => {
    for (const p of Object.values(sim.providers)) p.configure({ answerTokens: 20_000, chunkGapMs: 0 });
    const { key } = await one.createKey({ rateLimitRpm: 1000 });
    const first = await keyed(one.baseA, key);
    const text = await first.text();
    expect(text.length).toBeGreaterThan(2 ** 20);
    expect(text).toContain('data: [DONE]');
    for (const p of Object.values(sim.providers)) p.configure({ answerTokens: null });
    const repeat = await keyed(two.baseA, key);
    expect(repeat.status).toBe(422);
    const { error } = (await repeat.json()) as { error: { code: string; param: string; message: string } };
    expect(error).toMatchObject({ code: 'unprocessable_entity', param: 'X-Idempotency-Key' });
    expect(error.message).toMatch(/was answered \(200\) and billed, but its answer \(\d+ bytes\) was not kept/);
  }, 60_000);
});

describe('a short keyed stream whose begun answer is written slowly, on instances sharing PostgreSQL only', () => {
  it('replays on the other instance with its events, not a 409 "still in progress" for 24 hours', async () => {
    // The first write of an answer (a stream's begun one) takes 300 ms, as on a busy database; the stream ends at once.
    // Its events' write, on another pooled connection, must not land first and be overwritten by the begun answer.
    await pg.psql(
      `CREATE SEQUENCE slow_answer;
       CREATE FUNCTION slow_answer() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
         IF current_query() ILIKE 'update%"answer"%' AND nextval('slow_answer') = 1 THEN PERFORM pg_sleep(0.3); END IF;
         RETURN NULL; END $$;
       CREATE TRIGGER slow_answer BEFORE UPDATE ON idempotency_keys FOR EACH STATEMENT EXECUTE FUNCTION slow_answer();`,
      database,
    );
    const { key } = await one.createKey({ rateLimitRpm: 1000 });
    const first = await keyed(one.baseA, key, 'short-stream');
    const text = await first.text();
    expect(text).toContain('data: [DONE]');
    // Past the slow write: the answer is as it will stay.
    await new Promise((r) => setTimeout(r, 400));
    const repeat = await keyed(two.baseA, key, 'short-stream');
    expect(repeat.status).toBe(200);
    expect(repeat.headers.get('idempotent-replayed')).toBe('true');
    expect(await repeat.text()).toBe(text);
  }, 30_000);
});
