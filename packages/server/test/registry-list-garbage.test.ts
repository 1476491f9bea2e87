import type { Server } from 'node:http';
import type { GatewayFileConfig } from '@gw/schema';
import { type Simulator, startSimulator } from '@gw/simulator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';
import { startRawUpstream } from './helpers/raw-upstream.js';

let sim: Simulator;
let gw: TestGateway;
let key: string;
const hosts: Server[] = [];
/** What the stand-in Mistral and Cohere hosts answer at their model lists, set by each test. */
const lists: { mistral: unknown; cohere: unknown; azure: unknown } = { mistral: null, cohere: null, azure: null };

const upstreamNames = (c: GatewayFileConfig, provider: string) =>
  c.models.flatMap((m) => m.offers.filter((o) => o.provider === provider).map((o) => o.upstreamModel));

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  const demo = sim.demoConfig();
  const good = {
    mistral: { object: 'list', data: upstreamNames(demo, 'mistral').map((id) => ({ id })) },
    cohere: { models: upstreamNames(demo, 'cohere').map((name) => ({ name })) },
    // An api-version older than 2023-05-15 lists the resource's deployments, which offers name.
    azure: { object: 'list', data: upstreamNames(demo, 'azure').map((id) => ({ id, object: 'deployment' })) },
  };
  Object.assign(lists, good);
  const host = async (which: 'mistral' | 'cohere' | 'azure') => {
    const { server, baseUrl } = await startRawUpstream((req, res) => {
      const listed = /\/(models|deployments)\b/.test(req.url ?? '');
      res.writeHead(listed ? 200 : 404, { 'content-type': 'application/json' });
      res.end(JSON.stringify(listed ? lists[which] : {}));
    });
    hosts.push(server);
    return baseUrl;
  };
  const [mistralUrl, cohereUrl, azureUrl] = [await host('mistral'), await host('cohere'), await host('azure')];
  gw = await startGateway({
    sim,
    catalogue: (c) => ({
      ...c,
      providers: c.providers.map((p) =>
        p.id === 'mistral'
          ? { ...p, baseUrl: mistralUrl }
          : p.id === 'cohere'
            ? { ...p, baseUrl: cohereUrl.replace(/\/v1$/, '') }
            : p.id === 'azure'
              ? { ...p, baseUrl: azureUrl.replace(/\/v1$/, ''), apiVersion: '2022-12-01' }
              : p,
      ),
    }),
  });
  key = (await gw.createKey({ rateLimitRpm: 1000 })).key;
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await sim?.close();
  for (const s of hosts) s.close();
});

async function providersOf(id: string): Promise<string[] | null> {
  const res = await fetch(`${gw.baseB}/models/${encodeURIComponent(id)}`, { headers: { authorization: `Bearer ${key}` } });
  return res.status === 200 ? ((await res.json()) as { providers: string[] }).providers : null;
}

describe('a Mistral, Cohere or Azure model list with entries but no model names', () => {
  it('is a broken answer: the provider is stale and keeps its last list, rather than every model it alone serves leaving', async () => {
    expect(await providersOf('mistral/large')).toEqual(['mistral']);
    expect(await providersOf('cohere/rerank-v3.5')).toEqual(['cohere']);
    expect(await providersOf('openai/gpt-4o-mini')).toEqual(['azure']);
    const good = { ...lists };
    // The entries are there, but not under the field each provider names its models by (a changed or broken API).
    lists.mistral = { object: 'list', data: [{ name: 'mistral-large-latest' }, { model: 'mistral-small-latest' }] };
    lists.cohere = { models: [{ id: 'rerank-v3.5' }, { id: 'embed-multilingual-v3.0' }] };
    lists.azure = { object: 'list', data: [{ model: 'gpt-4o-mini' }] };
    try {
      const rebuilt = await gw.admin<{ providers: Record<string, string>; unlisted: string[] }>('POST', '/registry/rebuild');
      expect(rebuilt.body.providers.mistral).toBe('stale');
      expect(rebuilt.body.providers.cohere).toBe('stale');
      expect(rebuilt.body.providers.azure).toBe('stale');
      expect(rebuilt.body.unlisted).toEqual([]);
      expect(await providersOf('mistral/large')).toEqual(['mistral']);
      expect(await providersOf('cohere/rerank-v3.5')).toEqual(['cohere']);
      expect(await providersOf('openai/gpt-4o-mini')).toEqual(['azure']);
    } finally {
      Object.assign(lists, good);
    }
    // An empty list is still an empty catalogue: the provider serves nothing now.
    lists.mistral = { object: 'list', data: [] };
    try {
      const rebuilt = await gw.admin<{ providers: Record<string, string> }>('POST', '/registry/rebuild');
      expect(rebuilt.body.providers.mistral).toBe('ok');
      expect(await providersOf('mistral/large')).toBeNull();
    } finally {
      Object.assign(lists, good);
    }
    await gw.admin('POST', '/registry/rebuild');
    expect(await providersOf('mistral/large')).toEqual(['mistral']);
  });
});

describe('/readyz', () => {
  it('names a provider whose model list the last rebuild could not read, until one reads it again', async () => {
    const modelLists = async () => ((await (await fetch(`${gw.url}/readyz`)).json()) as { modelLists: Record<string, string> }).modelLists;
    expect(await modelLists()).toEqual({});
    const good = { ...lists };
    lists.mistral = { object: 'list' };
    try {
      await gw.admin('POST', '/registry/rebuild');
      // Still ready, serving by its last known list: an operator's probe is told which list is old.
      expect(await modelLists()).toEqual({ mistral: 'stale' });
      expect(await providersOf('mistral/large')).toEqual(['mistral']);
    } finally {
      Object.assign(lists, good);
    }
    await gw.admin('POST', '/registry/rebuild');
    expect(await modelLists()).toEqual({});
  });
});
