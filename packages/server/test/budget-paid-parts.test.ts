import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, type RedisServer, startPostgres, startRedis } from '@gw/testkit';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { estimateTokens } from '../src/providers/usage-estimate.js';
import { resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';

// A budget hold covers one attempt's worst case; an attempt the provider was paid for in part before it failed is billed
// on top of the answer of the offer that fails over. Two instances sharing PostgreSQL and Redis, as in production.

const MISTRAL_THEN_SCALEWAY = 'test/embed-mistral-scaleway';
const PRICE = 0.1;

let pg: PostgresServer;
let redis: RedisServer;
let sim: Simulator;
let one: TestGateway;
let two: TestGateway;

beforeAll(async () => {
  [pg, redis, sim] = await Promise.all([startPostgres(), startRedis(), startSimulator({ latencyScale: 0 })]);
  const databaseUrl = await pg.createDatabase();
  const pricing = { prompt_per_1m: PRICE, completion_per_1m: 0, currency: 'EUR' as const };
  const catalogue = (c: ReturnType<Simulator['demoConfig']>) => ({
    ...c,
    models: [
      ...c.models,
      {
        id: MISTRAL_THEN_SCALEWAY,
        kind: 'embedding' as const,
        owned_by: 'test',
        context_window: 8192,
        offers: [
          { provider: 'mistral', upstreamModel: 'mistral-embed', pricing },
          { provider: 'scaleway', upstreamModel: 'bge-multilingual-gemma2', pricing },
        ],
      },
    ],
  });
  one = await startGateway({ databaseUrl, redisUrl: redis.url, sim, catalogue });
  two = await startGateway({ databaseUrl, redisUrl: redis.url, sim, catalogue });
}, 120_000);

afterAll(async () => {
  await one?.close();
  await two?.close();
  await sim?.close();
  await pg?.stop();
  await redis?.stop();
});

beforeEach(() => resetProviders(sim));

// 48 inputs of 500 tokens as the providers count them (667 at the gateway's estimate): two calls of 24 at Mistral.
const chunks = Array.from({ length: 48 }, (_, i) => `chunk ${String(i).padStart(3, '0')} `.padEnd(2000, 'abcd'));
/** The request's hold: every input at the gateway's estimate. */
const worst = (estimateTokens(chunks, 3) * PRICE) / 1e6;
/** Mistral's first call, paid before its second fails. */
const firstCall = (24 * 500 * PRICE) / 1e6;
/** Scaleway's answer to all 48 inputs. */
const whole = (48 * 500 * PRICE) / 1e6;

async function embed(gw: TestGateway, key: string) {
  const res = await fetch(`${gw.baseA}/embeddings`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: MISTRAL_THEN_SCALEWAY, input: chunks }),
  });
  const json = (await res.json()) as { error?: { code: string } };
  return { status: res.status, code: json.error?.code, provider: res.headers.get('x-gateway-provider'), retry: res.headers.get('x-should-retry') };
}

async function spentOf(path: string): Promise<number> {
  await Promise.all([one, two].map((g) => g.gateway.services.usage.flush()));
  return (await one.admin<{ spent: number }>('GET', path)).body.spent;
}

/** Mistral answers the first call of the next request and fails the second, which the gateway fails over. */
const failSecondCall = () => sim.providers.mistral?.setFault({ kind: 'status', status: 503, retryAfter: null, skip: 1, times: 1, endpoints: ['embeddings'] });

describe('a failover after the provider was paid for part of the failed attempt', () => {
  it('is not tried when the budget cannot hold the paid part on top of the worst case: the failure is answered, billed the part, and the budget is not passed', async () => {
    expect(firstCall + whole).toBeGreaterThan(worst);
    const { id, key } = await one.createKey({ rateLimitRpm: 1000, budget: worst });
    failSecondCall();
    expect(await embed(one, key)).toMatchObject({ status: 502, code: 'provider_down' });
    expect(sim.providers.scaleway?.stats().byEndpoint['embeddings'] ?? 0).toBe(0);
    const spent = await spentOf(`/keys/${id}`);
    expect(spent).toBeCloseTo(firstCall, 12);
    expect(spent).toBeLessThanOrEqual(worst);
    // No hold is left: what the budget has left is too little for another, said as used up, not as held by requests in flight.
    expect(await embed(two, key)).toMatchObject({ status: 402, retry: 'false' });
    // And raised by what was spent, it holds the next request whole.
    expect((await one.admin('PATCH', `/keys/${id}`, { budget: worst + spent })).status).toBe(200);
    expect(await embed(two, key)).toMatchObject({ status: 200, provider: 'mistral' });
  });

  it('goes through when the budget holds the paid part too: billed the part and the answer, on the key and its workspace, and the extra hold is let go', async () => {
    const room = worst + firstCall + 1e-9;
    const ws = await one.admin<{ id: string }>('POST', '/workspaces', { name: 'paid-parts', enabledModels: null, budget: room });
    const { id, key } = await one.createKey({ rateLimitRpm: 1000, budget: room, workspaceId: ws.body.id });
    failSecondCall();
    expect(await embed(two, key)).toMatchObject({ status: 200, provider: 'scaleway' });
    for (const path of [`/keys/${id}`, `/workspaces/${ws.body.id}`]) {
      const spent = await spentOf(path);
      expect(spent, path).toBeCloseTo(firstCall + whole, 12);
      expect(spent, path).toBeLessThanOrEqual(room);
    }
    // With room for exactly one more worst case on both, the next request goes through: no hold of the first is left.
    const next = firstCall + whole + worst + 1e-9;
    expect((await one.admin('PATCH', `/keys/${id}`, { budget: next })).status).toBe(200);
    expect((await one.admin('PATCH', `/workspaces/${ws.body.id}`, { budget: next })).status).toBe(200);
    expect(await embed(one, key)).toMatchObject({ status: 200, provider: 'mistral' });
  });
});
