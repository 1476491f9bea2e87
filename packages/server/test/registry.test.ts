import { type Simulator, startSimulator } from '@gw/simulator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';

let sim: Simulator;
let gw: TestGateway;
let key: string;

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  gw = await startGateway({ sim, env: { GW_REGISTRY_INTERVAL_S: '1' } });
  key = (await gw.createKey({ rateLimitRpm: 1000 })).key;
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await sim?.close();
});

const auth = () => ({ authorization: `Bearer ${key}` });
async function providersOf(id: string): Promise<string[] | null> {
  const res = await fetch(`${gw.baseB}/models/${encodeURIComponent(id)}`, { headers: auth() });
  return res.status === 200 ? ((await res.json()) as { providers: string[] }).providers : null;
}
const chat = (model: string) =>
  fetch(`${gw.baseA}/chat/completions`, {
    method: 'POST',
    headers: { ...auth(), 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'x' }] }),
  });

describe('the live registry', () => {
  it('drops an offer when its provider stops listing the model, and regains it', async () => {
    const nebius = sim.providers.nebius;
    const before = nebius?.models() ?? [];
    nebius?.setModels(before.filter((m) => m !== 'meta-llama/Llama-3.3-70B-Instruct'));
    const rebuilt = await gw.admin<{ providers: Record<string, string> }>('POST', '/registry/rebuild');
    expect(rebuilt.body.providers.nebius).toBe('ok');
    expect(await providersOf('meta/llama-3.3-70b')).toEqual(['scaleway', 'ovh']);
    nebius?.setModels(before);
    await gw.admin('POST', '/registry/rebuild');
    expect(await providersOf('meta/llama-3.3-70b')).toEqual(['scaleway', 'ovh', 'nebius']);
  });

  it('a model whose every offer disappears leaves the registry (404 in A, 400 in B), then returns', async () => {
    const ovh = sim.providers.ovh;
    const nebius = sim.providers.nebius;
    const [ovhBefore, nebiusBefore] = [ovh?.models() ?? [], nebius?.models() ?? []];
    ovh?.setModels(ovhBefore.filter((m) => m !== 'Qwen3-32B'));
    nebius?.setModels(nebiusBefore.filter((m) => m !== 'Qwen/Qwen3-32B'));
    // The rebuild names it for the operator: configured, but left out.
    const rebuilt = await gw.admin<{ unlisted: string[] }>('POST', '/registry/rebuild');
    expect(rebuilt.body.unlisted).toEqual(['qwen/qwen3-32b']);
    const a = await chat('qwen/qwen3-32b');
    expect(a.status).toBe(404);
    // Told it is not served now, by which providers, rather than that the id is wrong.
    const notServed = (base: string) =>
      `The model 'qwen/qwen3-32b' is not served right now: no provider of it (ovh, nebius) lists it in its models. GET ${base}/models lists the models served.`;
    expect(((await a.json()) as { error: { code: string; message: string } }).error).toMatchObject({ code: 'model_not_found', message: notServed('/v1') });
    const b = await fetch(`${gw.baseB}/chat/completions`, {
      method: 'POST',
      headers: { ...auth(), 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'qwen/qwen3-32b', messages: [{ role: 'user', content: 'x' }] }),
    });
    expect(b.status).toBe(400);
    expect(((await b.json()) as { error: { code: string; message: string } }).error).toMatchObject({ code: 'model_not_found', message: notServed('/alt/v1') });
    // An embedding route asked for it: another kind's model, which does not exist there.
    const asEmbedding = await fetch(`${gw.baseA}/embeddings`, {
      method: 'POST',
      headers: { ...auth(), 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'qwen/qwen3-32b', input: ['x'] }),
    });
    expect(((await asEmbedding.json()) as { error: { message: string } }).error.message).not.toContain('not served right now');
    // A key whose workspace enables it, asking with ':eu', is told the same of the id it asked for.
    const ws = await gw.admin<{ id: string }>('POST', '/workspaces', { name: 'qwen-only', enabledModels: ['qwen/qwen3-32b'] });
    const narrow = await gw.createKey({ workspaceId: ws.body.id, rateLimitRpm: 1000 });
    const eu = await fetch(`${gw.baseA}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${narrow.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'qwen/qwen3-32b:eu', messages: [{ role: 'user', content: 'x' }] }),
    });
    expect(eu.status).toBe(404);
    expect(((await eu.json()) as { error: { message: string } }).error.message).toBe(notServed('/v1').replace("'qwen/qwen3-32b'", "'qwen/qwen3-32b:eu'"));
    const list = (await (await fetch(`${gw.baseA}/models`, { headers: auth() })).json()) as { data: { id: string }[] };
    expect(list.data.map((m) => m.id)).not.toContain('qwen/qwen3-32b');
    // Its own entry says the same, in each variant.
    for (const [base, status] of [
      [gw.baseA, 404],
      [gw.baseB, 400],
    ] as const) {
      const one = await fetch(`${base}/models/qwen%2Fqwen3-32b`, { headers: auth() });
      expect(one.status).toBe(status);
      const path = base === gw.baseA ? '/v1' : '/alt/v1';
      expect(((await one.json()) as { error: { code: string; message: string } }).error).toMatchObject({ code: 'model_not_found', message: notServed(path) });
    }
    ovh?.setModels(ovhBefore);
    nebius?.setModels(nebiusBefore);
    expect((await gw.admin<{ unlisted: string[] }>('POST', '/registry/rebuild')).body.unlisted).toEqual([]);
    expect((await chat('qwen/qwen3-32b')).status).toBe(200);
  });

  it('reports the providers in the config’s order, whichever answers first', async () => {
    const first = Object.keys((await gw.admin<{ providers: Record<string, string> }>('POST', '/registry/rebuild')).body.providers);
    // The first provider's list now comes last.
    sim.providers[first[0] as string]?.setFault({ kind: 'latency', ms: 300, endpoints: ['models'] });
    try {
      const again = await gw.admin<{ providers: Record<string, string> }>('POST', '/registry/rebuild');
      expect(Object.keys(again.body.providers)).toEqual(first);
      expect(Object.values(again.body.providers).every((s) => s === 'ok')).toBe(true);
    } finally {
      sim.providers[first[0] as string]?.clearFaults();
    }
  });

  it('keeps a failing provider’s last good list', async () => {
    sim.providers.ovh?.setFault({ kind: 'status', status: 500, endpoints: ['models'] });
    try {
      const res = await gw.admin<{ providers: Record<string, string> }>('POST', '/registry/rebuild');
      expect(res.body.providers.ovh).toBe('stale');
      expect(res.body.providers.scaleway).toBe('ok');
      expect(await providersOf('meta/llama-3.3-70b')).toContain('ovh');
    } finally {
      sim.providers.ovh?.clearFaults();
    }
  });

  it('rebuilds by itself every GW_REGISTRY_INTERVAL_S', async () => {
    const scaleway = sim.providers.scaleway;
    const before = scaleway?.models() ?? [];
    scaleway?.setModels(before.filter((m) => m !== 'llama-3.3-70b-instruct'));
    try {
      await eventually(async () => expect(await providersOf('meta/llama-3.3-70b')).toEqual(['ovh', 'nebius']), 4000);
    } finally {
      scaleway?.setModels(before);
    }
    await eventually(async () => expect(await providersOf('meta/llama-3.3-70b')).toEqual(['scaleway', 'ovh', 'nebius']), 4000);
  });

  it('reads again soon the list of a provider that was down at start, not only after the interval', async () => {
    sim.providers.ovh?.setFault({ kind: 'status', status: 500, endpoints: ['models'] });
    // The default interval (6 hours): only the retries can bring ovh's offers back within the test.
    const late = await startGateway({ sim });
    try {
      const lateKey = (await late.createKey({ rateLimitRpm: 1000 })).key;
      const providers = async () =>
        (
          (await (await fetch(`${late.baseB}/models/meta%2Fllama-3.3-70b`, { headers: { authorization: `Bearer ${lateKey}` } })).json()) as {
            providers: string[];
          }
        ).providers;
      expect(await providers()).toEqual(['scaleway', 'nebius']);
      sim.providers.ovh?.clearFaults();
      await eventually(async () => expect(await providers()).toEqual(['scaleway', 'ovh', 'nebius']), 12_000);
      // A list that an admin rebuild found unreadable is asked again soon too (seen here by a change made meanwhile).
      sim.providers.ovh?.setFault({ kind: 'status', status: 500, endpoints: ['models'] });
      const stale = await late.admin<{ providers: Record<string, string> }>('POST', '/registry/rebuild');
      expect(stale.body.providers.ovh).toBe('stale');
      const ovhModels = sim.providers.ovh?.models() ?? [];
      sim.providers.ovh?.setModels(ovhModels.filter((m) => m !== 'Meta-Llama-3_3-70B-Instruct'));
      sim.providers.ovh?.clearFaults();
      try {
        await eventually(async () => expect(await providers()).toEqual(['scaleway', 'nebius']), 12_000);
      } finally {
        sim.providers.ovh?.setModels(ovhModels);
      }
    } finally {
      sim.providers.ovh?.clearFaults();
      await late.close();
    }
  }, 60_000);

  it('a model whose only provider was unreachable at start is an outage to retry (503 in A, 502 in B), not a model that does not exist', async () => {
    const mistral = sim.providers.mistral;
    mistral?.setFault({ kind: 'status', status: 500, endpoints: ['models'] });
    const late = await startGateway({ sim });
    try {
      const ws = await late.admin<{ id: string }>('POST', '/workspaces', { name: 'small-only', enabledModels: ['mistral/small'] });
      const [own, narrow] = [await late.createKey({ rateLimitRpm: 1000 }), await late.createKey({ workspaceId: ws.body.id, rateLimitRpm: 1000 })];
      const ask = async (base: string, model: string, key = own.key, headers: Record<string, string> = {}) => {
        const res = await fetch(`${base}/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
          body: JSON.stringify({ model, messages: [{ role: 'user', content: 'x' }] }),
        });
        const body = (await res.json()) as { error?: { code: string; message: string } };
        return [res.status, res.headers.get('retry-after'), body.error?.code ?? 'ok'];
      };
      expect(await ask(late.baseA, 'mistral/large')).toEqual([503, '5', 'provider_down']);
      expect(await ask(late.baseA, 'mistral/large:eu')).toEqual([503, '5', 'provider_down']);
      expect(await ask(late.baseB, 'mistral/large')).toEqual([502, '5', 'upstream_unavailable']);
      // Still model_not_found where the key could not use it anyway, and for an id no configuration names.
      expect(await ask(late.baseA, 'mistral/large', narrow.key)).toEqual([404, null, 'model_not_found']);
      expect(await ask(late.baseA, 'mistral/larger')).toEqual([404, null, 'model_not_found']);
      // A model that another provider lists is served by it meanwhile.
      expect(await ask(late.baseA, 'mistral/small')).toEqual([200, null, 'ok']);
      // Pinned to the unreachable provider, it is that outage too, not a pin to a provider that does not serve it (400).
      const pin = { 'x-gateway-provider': 'mistral' };
      expect(await ask(late.baseB, 'mistral/small', own.key, pin)).toEqual([502, '5', 'upstream_unavailable']);
      expect(await ask(late.baseB, 'mistral/small', own.key, { 'x-gateway-provider': 'nebius' })).toEqual([400, null, 'provider_unsupported']);
      // Asked for by id, it is left out as the list leaves it, but never said to be unlisted by a provider never read.
      for (const base of [late.baseA, late.baseB]) {
        const res = await fetch(`${base}/models/mistral%2Flarge`, { headers: { authorization: `Bearer ${own.key}` } });
        const { error } = (await res.json()) as { error: { code: string; message: string } };
        expect([res.status, error.code]).toEqual([base === late.baseA ? 404 : 400, 'model_not_found']);
        expect(error.message).toContain('the model list of mistral could not be read since the gateway started');
      }
      mistral?.clearFaults();
      const rebuilt = await late.admin<{ providers: Record<string, string> }>('POST', '/registry/rebuild');
      expect(rebuilt.body.providers.mistral).toBe('ok');
      expect(await ask(late.baseA, 'mistral/large')).toEqual([200, null, 'ok']);
      expect(await ask(late.baseB, 'mistral/small', own.key, pin)).toEqual([200, null, 'ok']);
    } finally {
      mistral?.clearFaults();
      await late.close();
    }
  }, 60_000);

  it('filters B by family, capability and provider in any letter case, and A by kind', async () => {
    const get = async (base: string, q: string) =>
      ((await (await fetch(`${base}/models?${q}`, { headers: auth() })).json()) as { data: Record<string, unknown>[] }).data;
    const meta = await get(gw.baseB, 'family=meta');
    expect(meta.length).toBeGreaterThan(0);
    expect(meta.every((m) => String(m.id).startsWith('meta/'))).toBe(true);
    const onNebius = await get(gw.baseB, 'provider=nebius');
    expect(onNebius.every((m) => (m.providers as string[]).includes('nebius'))).toBe(true);
    const tools = await get(gw.baseB, 'capability=tools');
    expect(tools.every((m) => (m.capabilities as string[]).includes('tools'))).toBe(true);
    // In any letter case, the same list: a value off only in case is the one meant, not a filter to nothing.
    expect([onNebius.length, tools.length].every((n) => n > 0)).toBe(true);
    expect(await get(gw.baseB, 'family=Meta')).toEqual(meta);
    expect(await get(gw.baseB, 'provider=NEBIUS')).toEqual(onNebius);
    expect(await get(gw.baseB, 'capability=Tools')).toEqual(tools);
    expect(await get(gw.baseB, 'family=META&capability=TOOLS')).toEqual(await get(gw.baseB, 'family=meta&capability=tools'));
    // A value no model has is a filter like any other: an empty list, not an error.
    expect(await get(gw.baseB, 'family=nobody')).toEqual([]);
    const audio = await get(gw.baseA, 'kind=audio');
    expect(audio.every((m) => m.kind === 'audio')).toBe(true);
    const bad = await fetch(`${gw.baseA}/models?kind=video`, { headers: auth() });
    expect(bad.status).toBe(400);
    // The values it may take are listed.
    expect(((await bad.json()) as { error: { message: string } }).error.message).toBe(
      `Invalid querystring: 'kind' has a value that is not allowed (allowed: "chat", "embedding", "rerank", "audio").`,
    );
    // A filter of the other variant (or none at all) is told this list's filters, in the variant's envelope.
    for (const [base, q, name, code, filters] of [
      [gw.baseB, 'kind=chat', 'kind', 'invalid_request', 'family, capability, provider'],
      [gw.baseA, 'family=meta', 'family', 'validation_error', 'kind'],
      [gw.baseA, 'kind=chat&limit=5', 'limit', 'validation_error', 'kind'],
    ] as const) {
      const res = await fetch(`${base}/models?${q}`, { headers: auth() });
      expect([res.status, ((await res.json()) as { error: unknown }).error]).toEqual([
        400,
        expect.objectContaining({ code, param: name, message: `Invalid querystring: '${name}' is not a filter of this list; its filters are ${filters}.` }),
      ]);
    }
  });

  it('refuses a filter given twice, saying a filter takes one value', async () => {
    for (const [base, q, name, code] of [
      [gw.baseB, 'provider=ovh&provider=nebius', 'provider', 'invalid_request'],
      [gw.baseB, 'family=meta&capability=tools&family=mistral&family=qwen', 'family', 'invalid_request'],
      [gw.baseA, 'kind=chat&kind=audio', 'kind', 'validation_error'],
    ] as const) {
      const res = await fetch(`${base}/models?${q}`, { headers: auth() });
      const body = (await res.json()) as { error: { message: string; code: string; param: string } };
      const times = q.split('&').filter((p) => p.startsWith(`${name}=`)).length;
      expect([res.status, body.error]).toEqual([
        400,
        expect.objectContaining({ code, param: name, message: `Invalid querystring: '${name}' is given ${times} times; a filter takes one value.` }),
      ]);
    }
  });
});
