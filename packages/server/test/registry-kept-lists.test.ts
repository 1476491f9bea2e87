import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, startPostgres } from '@gw/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';

let pg: PostgresServer;
let sim: Simulator;
let db: string;
let one: TestGateway;

beforeAll(async () => {
  [pg, sim] = await Promise.all([startPostgres(), startSimulator({ latencyScale: 0 })]);
  db = await pg.createDatabase();
  one = await startGateway({ sim, databaseUrl: db });
}, 120_000);
afterAll(async () => {
  await one?.close();
  await sim?.close();
  await pg?.stop();
});

async function ask(gw: TestGateway, key: string, model: string): Promise<[number, string]> {
  const res = await fetch(`${gw.baseA}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'x' }] }),
  });
  const body = (await res.json()) as { error?: { code: string } };
  return [res.status, body.error?.code ?? (res.headers.get('x-gateway-provider') as string)];
}

describe('a provider’s last known model list', () => {
  it('is kept in the store: an instance started while the list cannot be read serves by the last one read', async () => {
    const [mistral, scaleway] = [sim.providers.mistral, sim.providers.scaleway];
    const before = scaleway?.models() ?? [];
    // The running instance reads a Scaleway list without Llama, then Scaleway's and Mistral's lists stop answering.
    scaleway?.setModels(before.filter((m) => m !== 'llama-3.3-70b-instruct'));
    try {
      expect((await one.admin<{ providers: Record<string, string> }>('POST', '/registry/rebuild')).body.providers.scaleway).toBe('ok');
      for (const p of [mistral, scaleway]) p?.setFault({ kind: 'status', status: 500, endpoints: ['models'] });
      // A second instance (a scale-out, a restart) sharing the store starts meanwhile.
      const two = await startGateway({ sim, databaseUrl: db });
      try {
        const key = (await two.createKey({ rateLimitRpm: 1000 })).key;
        // Served by the kept list, as by the instance that had been running: not a 503 "list unread since start".
        expect(await ask(two, key, 'mistral/medium')).toEqual([200, 'mistral']);
        // The kept list is the one read last, not every configured offer: the offer it left out stays out.
        const providersOf = async (gw: TestGateway) =>
          ((await (await fetch(`${gw.baseB}/models/meta%2Fllama-3.3-70b`, { headers: { authorization: `Bearer ${key}` } })).json()) as { providers: string[] })
            .providers;
        expect(await providersOf(two)).toEqual(['ovh', 'nebius']);
        expect(await providersOf(one)).toEqual(['ovh', 'nebius']);
        const rebuilt = await two.admin<{ providers: Record<string, string> }>('POST', '/registry/rebuild');
        expect([rebuilt.body.providers.mistral, rebuilt.body.providers.scaleway]).toEqual(['stale', 'stale']);
      } finally {
        await two.close();
      }
    } finally {
      for (const p of [mistral, scaleway]) p?.clearFaults();
      scaleway?.setModels(before);
    }
  }, 60_000);

  it('is the one read last by any instance: a list read again as this instance last kept it replaces another instance’s since', async () => {
    const scaleway = sim.providers.scaleway;
    const before = scaleway?.models() ?? [];
    const llama = 'llama-3.3-70b-instruct';
    await one.admin('POST', '/registry/rebuild');
    const two = await startGateway({ sim, databaseUrl: db });
    let three: TestGateway | undefined;
    try {
      const key = (await one.createKey({ rateLimitRpm: 1000 })).key;
      const providersOf = async (gw: TestGateway) =>
        ((await (await fetch(`${gw.baseB}/models/meta%2Fllama-3.3-70b`, { headers: { authorization: `Bearer ${key}` } })).json()) as { providers: string[] })
          .providers;
      // Scaleway drops Llama and the second instance reads (and keeps) that list; then Scaleway lists it again, read by the first.
      scaleway?.setModels(before.filter((m) => m !== llama));
      await two.admin('POST', '/registry/rebuild');
      scaleway?.setModels(before);
      await one.admin('POST', '/registry/rebuild');
      expect(await providersOf(one)).toEqual(['scaleway', 'ovh', 'nebius']);
      // The second instance is scaled in; Scaleway's list stops answering and an instance starts (or the first restarts).
      await two.close();
      scaleway?.setFault({ kind: 'status', status: 500, endpoints: ['models'] });
      three = await startGateway({ sim, databaseUrl: db });
      // It serves by the list Scaleway gave last, as the running instance does, not by the one it had dropped Llama from.
      expect(await providersOf(three)).toEqual(['scaleway', 'ovh', 'nebius']);
    } finally {
      scaleway?.clearFaults();
      scaleway?.setModels(before);
      await Promise.all([two.close(), three?.close()]);
    }
  }, 60_000);

  it('of a provider given another base URL is not taken up: its models wait for its own list', async () => {
    const mistral = sim.providers.mistral;
    mistral?.setFault({ kind: 'status', status: 500, endpoints: ['models'] });
    const moved = await startGateway({
      sim,
      databaseUrl: db,
      catalogue: (c) => ({ ...c, providers: c.providers.map((p) => (p.id === 'mistral' ? { ...p, baseUrl: p.baseUrl.replace('/v1', '//v1') } : p)) }),
    });
    try {
      const key = (await moved.createKey({ rateLimitRpm: 1000 })).key;
      expect(await ask(moved, key, 'mistral/medium')).toEqual([503, 'provider_down']);
    } finally {
      mistral?.clearFaults();
      await moved.close();
    }
  }, 60_000);
});
