import { describe, expect, it, vi } from 'vitest';

// The YAML parser, counted: it reads JSON a hundred times slower than JSON.parse, with a hundred times the memory.
const yamlReads = vi.hoisted(() => ({ n: 0 }));
vi.mock('yaml', async (importOriginal) => {
  const yaml = await importOriginal<typeof import('yaml')>();
  return {
    ...yaml,
    parseDocument: (...args: Parameters<typeof yaml.parseDocument>) => {
      yamlReads.n++;
      return yaml.parseDocument(...args);
    },
  };
});

const { parseConfigText } = await import('../src/config/index.js');

/** An operator's catalogue: 40 providers, 2,000 models of 5 offers each. */
function catalogue(): { providers: unknown[]; models: unknown[] } {
  const providers = Array.from({ length: 40 }, (_, p) => ({ id: `p${p}`, type: 'openai', baseUrl: `http://127.0.0.1:${9100 + p}/v1`, region: 'fr-par' }));
  const pricing = { prompt_per_1m: 0.1, completion_per_1m: 0.3, currency: 'EUR' };
  const models = Array.from({ length: 2000 }, (_, i) => ({
    id: `family-${i % 37}/model-${i}`,
    kind: 'chat',
    owned_by: 'Ünïcødé 日本',
    offers: Array.from({ length: 5 }, (_, k) => ({ provider: `p${(i + k * 7) % 40}`, upstreamModel: `up-${i % 500}`, pricing })),
  }));
  return { providers, models };
}

describe('a JSON config file of an operator’s size', () => {
  it('is read by JSON.parse alone when no key repeats, and a repeat is still told where it is', () => {
    const text = JSON.stringify(catalogue(), null, 2);
    yamlReads.n = 0;
    expect(parseConfigText(text, 'gw.json', {}).models).toHaveLength(2000);
    expect(yamlReads.n).toBe(0);
    // A repeat anywhere, nested deep or escaped, is found; only then does the YAML parser say where.
    const repeated = text.replace('"upstreamModel": "up-7",', '"upstreamModel": "up-7", "upstream\\u004dodel": "up-8",');
    expect(() => parseConfigText(repeated, 'gw.json', {})).toThrowError(/at \/: expected valid JSON \(Map keys must be unique at line \d+, column \d+\)/);
    expect(yamlReads.n).toBe(1);
  });
});
