import { type Simulator, startSimulator } from '@gw/simulator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';

let sim: Simulator;
let gw: TestGateway;
let key: string;

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  gw = await startGateway({ sim });
  key = (await gw.createKey({ rateLimitRpm: 1000 })).key;
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await sim?.close();
});

async function ask(variant: 'a' | 'b', model: string): Promise<[number, string]> {
  const res = await fetch(`${variant === 'a' ? gw.baseA : gw.baseB}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'x' }] }),
  });
  const body = (await res.json()) as { error?: { code: string } };
  return [res.status, body.error?.code ?? 'ok'];
}

describe('a model its provider stopped serving before the next scheduled rebuild', () => {
  it('leaves the registry once the provider says it has no such model, not hours later at the rebuild', async () => {
    const mistral = sim.providers.mistral;
    const before = mistral?.models() ?? [];
    expect(await ask('a', 'mistral/large')).toEqual([200, 'ok']);
    const listReads = () => mistral?.stats().byEndpoint.models ?? 0;
    const reads = listReads();
    // Mistral retires it (and its dated alias): its chat answers that the model is unknown, its list no longer names it.
    mistral?.setModels(before.filter((m) => !m.startsWith('mistral-large-')));
    try {
      expect(await ask('a', 'mistral/large')).toEqual([502, 'provider_down']);
      // The lists are read again at once: the model is told as not served, in each variant's code, not as an outage.
      await eventually(async () => expect(await ask('a', 'mistral/large')).toEqual([404, 'model_not_found']), 5_000);
      expect(await ask('b', 'mistral/large')).toEqual([400, 'model_not_found']);
      expect(listReads() - reads).toBe(1);
    } finally {
      mistral?.setModels(before);
      await gw.admin('POST', '/registry/rebuild');
    }
    expect(await ask('a', 'mistral/large')).toEqual([200, 'ok']);
    // A provider answering 404 to a model its list still names (a deployment gone) has its list read once a minute at most.
    const afterRebuild = listReads();
    mistral?.setFault({ kind: 'status', status: 404, endpoints: ['chat'] });
    try {
      for (let i = 0; i < 5; i++) expect((await ask('a', 'mistral/large'))[0]).toBeGreaterThanOrEqual(500);
      expect(listReads()).toBe(afterRebuild);
    } finally {
      mistral?.clearFaults();
    }
  }, 30_000);
});
