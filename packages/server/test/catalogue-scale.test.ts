import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';

// An operator's catalogue: hundreds of models, workspaces allowing hundreds of them. The work a request does with
// the workspace's allow-list is counted (reads of its ids), not timed.
const MODELS = 400;
const ENABLED = 300;
const LATER = 300;
let gw: TestGateway;

beforeAll(async () => {
  gw = await startGateway({
    catalogue: (c) => {
      const small = c.models.find((m) => m.id === 'mistral/small');
      if (!small) throw new Error('no mistral/small in the demo catalogue');
      for (let i = 0; i < MODELS; i++) c.models.push({ ...small, id: `scale/model-${String(i).padStart(4, '0')}` });
      // Its own model, at other prices, that no provider lists now: never `mistral/small` by another name.
      const offer = small.offers[0];
      if (!offer) throw new Error('mistral/small has no offer');
      c.models.push({ ...small, id: 'mistral/small:eu', offers: [{ ...offer, upstreamModel: 'listed-by-no-provider' }] });
      // Models its provider lists only later, as a provider's new models come in at a rebuild (a restart sees them all new).
      for (let i = 0; i < LATER; i++) c.models.push({ ...small, id: `later/model-${i}`, offers: [{ ...offer, upstreamModel: `later-upstream-${i}` }] });
      return c;
    },
  });
}, 60_000);
afterAll(async () => {
  await gw?.close();
});

/** The store's workspaces with their `enabledModels` counting each id read from them. */
function countReads(): { reads: number } {
  const counter = { reads: 0 };
  const repo = gw.gateway.services.store.workspaces;
  const get = repo.get.bind(repo);
  repo.get = async (id: string) => {
    const ws = await get(id);
    if (ws?.enabledModels == null) return ws;
    const ids = ws.enabledModels;
    const counted = new Proxy(ids, {
      get(target, prop, receiver) {
        if (typeof prop === 'string' && /^\d+$/.test(prop)) counter.reads++;
        return Reflect.get(target, prop, receiver);
      },
    });
    return { ...ws, enabledModels: counted };
  };
  return counter;
}

describe('a workspace allowing hundreds of models in a catalogue of hundreds', () => {
  it('reads its allow-list once per cached read, not once per model listed or per request', async () => {
    const enabled = Array.from({ length: ENABLED }, (_, i) => `scale/model-${String(i).padStart(4, '0')}`);
    const ws = await gw.admin<{ id: string }>('POST', '/workspaces', { name: 'wide', enabledModels: enabled });
    expect(ws.status).toBe(201);
    const { key } = await gw.createKey({ workspaceId: ws.body.id, rateLimitRpm: 1000 });
    const counter = countReads();
    gw.gateway.services.workspaces.forgetAll();
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    for (let i = 0; i < 5; i++) {
      const list = await fetch(`${gw.baseB}/models`, { headers });
      expect(list.status).toBe(200);
      expect(((await list.json()) as { data: unknown[] }).data).toHaveLength(ENABLED);
      const chat = await fetch(`${gw.baseA}/chat/completions`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ model: enabled.at(-1), messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
      });
      expect(chat.status).toBe(200);
      await chat.arrayBuffer();
    }
    // Ten requests, one read of the workspace: its ids once. Checked one by one, a list alone read them 400 × 300 / 2 times.
    expect(counter.reads).toBeLessThanOrEqual(ENABLED * 2);
  });
});

describe('a model configured as family/model:eu beside family/model', () => {
  it('is itself while no provider lists it: not served, never answered by family/model, and enabled by its own id', async () => {
    const { key } = await gw.createKey({ rateLimitRpm: 1000 });
    const res = await fetch(`${gw.baseA}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mistral/small:eu', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
    });
    const body = (await res.json()) as { model?: string; error?: { code: string; message: string } };
    expect([res.status, body.error?.code]).toEqual([404, 'model_not_found']);
    expect(body.error?.message).toMatch(/^The model 'mistral\/small:eu' is not served right now/);
    const ws = await gw.admin<{ enabledModels: string[] }>('POST', '/workspaces', { name: 'eu', enabledModels: ['mistral/small:eu'] });
    expect([ws.status, ws.body.enabledModels]).toEqual([201, ['mistral/small:eu']]);
    // The bare id with `:eu` added still names the bare model where no model has that id.
    const plain = await gw.admin<{ enabledModels: string[] }>('POST', '/workspaces', { name: 'plain', enabledModels: ['scale/model-0001:eu'] });
    expect([plain.status, plain.body.enabledModels]).toEqual([201, ['scale/model-0001']]);
  });
});

describe('hundreds of models new to the registry at a rebuild', () => {
  it('have their created time kept in the store in a few statements, not two per model', async () => {
    const small = gw.sim.demoConfig().models.find((m) => m.id === 'mistral/small');
    const offer = small?.offers[0];
    const provider = offer ? gw.sim.providers[offer.provider as keyof typeof gw.sim.providers] : undefined;
    if (!provider) throw new Error('no simulated provider for mistral/small');
    const settings = gw.gateway.services.store.settings;
    const calls = { one: 0, many: 0 };
    const one = settings.setIfAbsent.bind(settings);
    const many = settings.setManyIfAbsent?.bind(settings);
    settings.setIfAbsent = (name, value) => {
      if (name.startsWith('model_created:')) calls.one++;
      return one(name, value);
    };
    if (many)
      settings.setManyIfAbsent = (entries) => {
        calls.many += Math.ceil(entries.length / 500);
        return many(entries);
      };
    provider.setModels([...provider.models(), ...Array.from({ length: LATER }, (_, i) => `later-upstream-${i}`)]);
    const rebuilt = await gw.admin<{ models: number }>('POST', '/registry/rebuild');
    expect(rebuilt.status).toBe(200);
    expect(calls.one + calls.many).toBeLessThanOrEqual(2);
    const res = await fetch(`${gw.baseA}/models/later%2Fmodel-7`, { headers: { authorization: `Bearer ${(await gw.createKey()).key}` } });
    expect(((await res.json()) as { created: number }).created).toBeGreaterThan(0);
  });
});
