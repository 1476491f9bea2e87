import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEMO_API_KEYS, PROVIDER_IDS, type Simulator, startSimulator } from '../src/index.js';
import { json, must, userMessages } from './helpers.js';

let sim: Simulator;
beforeAll(async () => {
  sim = await startSimulator(); // default latencies
});
afterAll(() => sim.close());

describe('demo catalogue', () => {
  it('points every provider at its running server with its key and type', () => {
    const cfg = sim.demoConfig();
    expect(cfg.providers.map((p) => p.id)).toEqual([...PROVIDER_IDS]);
    for (const p of cfg.providers) {
      const live = must(sim.providers[p.id]);
      expect(p.baseUrl).toBe(live.baseUrl);
      expect(p.apiKey).toBe(DEMO_API_KEYS[p.id as keyof typeof DEMO_API_KEYS]);
      expect(p.type).toBe(live.type);
    }
    expect(must(cfg.providers.find((p) => p.id === 'azure')).baseUrl).toBe(must(sim.providers['azure']).url);
    expect(must(sim.providers['mistral']).baseUrl).toBe(`${must(sim.providers['mistral']).url}/v1`);
  });

  it('has overlapping chat offers at different prices, and the required special models', () => {
    const { models } = sim.demoConfig();
    const byId = new Map(models.map((m) => [m.id, m]));
    for (const id of ['mistral/small', 'meta/llama-3.3-70b']) {
      const offers = must(byId.get(id)).offers;
      expect(offers.length).toBe(3);
      expect(new Set(offers.map((o) => o.pricing.prompt_per_1m)).size).toBe(3);
      expect(new Set(offers.map((o) => o.upstreamModel)).size).toBe(3);
    }
    const r1 = must(byId.get('deepseek/r1-distill-70b'));
    expect(r1.offers.map((o) => o.provider).sort()).toEqual(['nebius', 'ovh']);
    expect(models.filter((m) => m.deprecated === true)).toHaveLength(1);
    expect(models.some((m) => m.kind === 'chat' && m.offers.some((o) => o.provider === 'azure'))).toBe(true);
    const rerank = models.filter((m) => m.kind === 'rerank');
    expect(rerank.map((m) => m.id)).toEqual(['cohere/rerank-v3.5']);
    const audioProviders = new Set(models.filter((m) => m.kind === 'audio').flatMap((m) => m.offers.map((o) => o.provider)));
    expect([...audioProviders].sort()).toEqual(['mistral', 'scaleway']);
    expect(must(byId.get('mistral/voxtral-mini')).offers).toHaveLength(2);
    expect(models.every((m) => m.offers.every((o) => o.pricing.currency === 'EUR'))).toBe(true);
  });

  it('marks exactly one beta model in each of the three embedding families', () => {
    const { models } = sim.demoConfig();
    const families = new Set(models.filter((m) => m.kind === 'embedding').map((m) => m.owned_by));
    expect([...families].sort()).toEqual(['baai', 'cohere', 'mistral']);
    for (const f of families) {
      const beta = models.filter((m) => m.owned_by === f && m.beta === true);
      expect(beta).toHaveLength(1);
      expect(must(beta[0]).kind).toBe('embedding');
    }
    expect(models.filter((m) => m.beta === true)).toHaveLength(3);
  });

  it("each provider's default models list names every upstream model its offers use", async () => {
    const { models } = sim.demoConfig();
    for (const id of PROVIDER_IDS) {
      const listed = must(sim.providers[id]).models();
      const used = models.flatMap((m) => m.offers.filter((o) => o.provider === id).map((o) => o.upstreamModel));
      expect(used.length).toBeGreaterThan(0);
      for (const u of used) expect(listed).toContain(u);
    }
    const scw = await json(must(sim.providers['scaleway']), '/v1/models');
    expect(scw.body.data.map((d: { id: string }) => d.id)).toContain('whisper-large-v3');
  });

  it('default speeds differ: nebius answers faster than ovh', async () => {
    const time = async (id: string, model: string) => {
      const t0 = performance.now();
      const r = await json(must(sim.providers[id]), '/v1/chat/completions', { model, messages: userMessages('speed test please') });
      expect(r.status).toBe(200);
      return performance.now() - t0;
    };
    const nebius = await time('nebius', 'meta-llama/Llama-3.3-70B-Instruct');
    const ovh = await time('ovh', 'Meta-Llama-3_3-70B-Instruct');
    expect(ovh).toBeGreaterThan(nebius + 30);
    expect(must(sim.providers['ovh']).settings().latencyMs).toBeGreaterThan(must(sim.providers['nebius']).settings().latencyMs);
  });
});
