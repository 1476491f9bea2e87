import { type Simulator, startSimulator } from '@gw/simulator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';

let sim: Simulator;
let gw: TestGateway;
let key: string;

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  gw = await startGateway({ sim });
  key = (await gw.createKey({ rateLimitRpm: 10_000 })).key;
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await sim?.close();
});

const auth = () => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json' });
const rebuild = () => gw.admin<{ providers: Record<string, string> }>('POST', '/registry/rebuild');
async function status(base: string, path: string, body: unknown): Promise<[number, string | undefined]> {
  const res = await fetch(`${base}${path}`, { method: 'POST', headers: auth(), body: JSON.stringify(body) });
  const json = (await res.json()) as { error?: { code: string } };
  return [res.status, json.error?.code];
}
async function providersOf(id: string): Promise<string[] | null> {
  const res = await fetch(`${gw.baseB}/models/${encodeURIComponent(id)}`, { headers: auth() });
  return res.status === 200 ? ((await res.json()) as { providers: string[] }).providers : null;
}

/** Runs `check` while `provider` lists its models without `gone`, then restores the list. */
async function without(provider: string, gone: string[], check: () => Promise<void>): Promise<void> {
  const p = sim.providers[provider];
  const before = p?.models() ?? [];
  p?.setModels(before.filter((m) => !gone.includes(m)));
  await rebuild();
  try {
    await check();
  } finally {
    p?.setModels(before);
    await rebuild();
  }
}

describe('the registry learns each provider’s models through its adapter', () => {
  it('reads Mistral’s, Azure’s and Cohere’s own lists', async () => {
    const res = await rebuild();
    expect(res.body.providers).toMatchObject({ mistral: 'ok', azure: 'ok', cohere: 'ok', scaleway: 'ok' });
    expect(await providersOf('mistral/small')).toEqual(['scaleway', 'ovh', 'mistral']);
    expect(await providersOf('openai/gpt-4o-mini')).toEqual(['azure']);
    expect(await providersOf('cohere/rerank-v3.5')).toEqual(['cohere']);
  });

  it('asks every provider for answers without content coding, which it would not decode', async () => {
    const post = (path: string, body: unknown, provider: string) =>
      fetch(`${gw.baseA}${path}`, { method: 'POST', headers: { ...auth(), 'x-gateway-provider': provider }, body: JSON.stringify(body) });
    const chat = (model: string) => ({ model, messages: [{ role: 'user', content: 'x' }] });
    const sent = [
      await post('/chat/completions', chat('mistral/small'), 'scaleway'),
      await post('/chat/completions', chat('mistral/small'), 'mistral'),
      await post('/chat/completions', chat('openai/gpt-4o-mini'), 'azure'),
      await post('/rerank', { model: 'cohere/rerank-v3.5', query: 'q', documents: ['a'] }, 'cohere'),
    ];
    expect(sent.map((r) => r.status)).toEqual([200, 200, 200, 200]);
    for (const provider of ['scaleway', 'mistral', 'azure', 'cohere']) {
      expect([provider, sim.providers[provider]?.stats().last?.headers['accept-encoding']]).toEqual([provider, 'identity']);
    }
  });

  it('a rerank model whose only offer disappears leaves at the next rebuild: 404 in A, 400 in B; it returns with its offer', async () => {
    const rerank = { model: 'cohere/rerank-v3.5', query: 'q', documents: ['a'] };
    await without('cohere', ['rerank-v3.5'], async () => {
      expect(await status(gw.baseA, '/rerank', rerank)).toEqual([404, 'model_not_found']);
      expect(await status(gw.baseB, '/rerank', rerank)).toEqual([400, 'model_not_found']);
    });
    expect((await status(gw.baseA, '/rerank', rerank))[0]).toBe(200);
  });

  it('a Mistral model (with its aliases) leaves the same way; an Azure deployment, which no list names, stays configured', async () => {
    const chat = (model: string) => ({ model, messages: [{ role: 'user', content: 'x' }] });
    await without('azure', ['gpt-4o-mini'], async () => {
      // Its 404 DeploymentNotFound is the provider failing this request (another offer would take it), not an unknown model.
      expect(await providersOf('openai/gpt-4o-mini')).toEqual(['azure']);
      expect(await status(gw.baseA, '/chat/completions', chat('openai/gpt-4o-mini'))).toEqual([502, 'provider_down']);
    });
    await without('mistral', ['mistral-large-latest', 'mistral-large-2411'], async () => {
      expect(await status(gw.baseB, '/chat/completions', chat('mistral/large'))).toEqual([400, 'model_not_found']);
    });
    // Still listed under its alias: the offer stays.
    await without('mistral', ['mistral-large-latest'], async () => {
      expect(await providersOf('mistral/large')).toEqual(['mistral']);
    });
  });

  it('a model that loses one of two transcription offers keeps the other', async () => {
    await without('mistral', ['voxtral-mini-latest', 'voxtral-mini-2507'], async () => {
      expect(await providersOf('mistral/voxtral-mini')).toEqual(['scaleway']);
    });
    expect(await providersOf('mistral/voxtral-mini')).toEqual(['mistral', 'scaleway']);
  });

  it('a model marked deprecated answers 410 model_deprecated in A (400 model_not_found in B)', async () => {
    expect(await status(gw.baseA, '/chat/completions', { model: 'mistral/nemo', messages: [{ role: 'user', content: 'x' }] })).toEqual([
      410,
      'model_deprecated',
    ]);
    expect(await status(gw.baseB, '/chat/completions', { model: 'mistral/nemo', messages: [{ role: 'user', content: 'x' }] })).toEqual([
      400,
      'model_not_found',
    ]);
  });

  it('a rebuild asked for while another runs reads every list again once that one ends, a change made meanwhile included', async () => {
    const ovh = sim.providers.ovh;
    const nebius = sim.providers.nebius;
    const before = ovh?.models() ?? [];
    const listsRead = () => ovh?.stats().byEndpoint.models ?? 0;
    const readBefore = listsRead();
    // Nebius' list comes slowly, so the first rebuild is still running after it has read OVH's.
    nebius?.setFault({ kind: 'latency', ms: 1500, endpoints: ['models'], times: 1 });
    const first = rebuild();
    await eventually(() => expect(listsRead()).toBeGreaterThan(readBefore));
    ovh?.setModels(before.filter((m) => m !== 'Qwen3-32B'));
    try {
      const second = await rebuild();
      expect(second.status).toBe(200);
      expect(await providersOf('qwen/qwen3-32b')).toEqual(['nebius']);
      // The first still answers with what it read.
      expect((await first).status).toBe(200);
    } finally {
      ovh?.setModels(before);
      await rebuild();
    }
    expect(await providersOf('qwen/qwen3-32b')).toEqual(['ovh', 'nebius']);
  });
});
