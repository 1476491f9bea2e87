import type { GatewayFileConfig } from '@gw/schema';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';

// Azure's "On Your Data" (`data_sources`) has Azure search an index or database with the identity of the gateway's
// Azure resource (its managed identity reads the operator's own indexes) and call embedding deployments that the
// request's usage does not count. A client's body passes to Azure as sent, so the field is refused before any call.

const MODEL = 'edge/azure-first';
const pricing = { prompt_per_1m: 1, completion_per_1m: 2, currency: 'EUR' as const };

function catalogue(c: GatewayFileConfig): GatewayFileConfig {
  return {
    providers: c.providers,
    models: [
      ...c.models,
      {
        id: MODEL,
        kind: 'chat',
        owned_by: 'test',
        capabilities: ['streaming'],
        offers: [
          { provider: 'azure', upstreamModel: 'gpt-4o-mini', pricing },
          { provider: 'scaleway', upstreamModel: 'llama-3.3-70b-instruct', pricing },
        ],
      },
    ],
  };
}

const ON_YOUR_DATA = [
  {
    type: 'azure_search',
    parameters: {
      endpoint: 'https://operator-search.search.windows.net',
      index_name: 'internal-contracts',
      authentication: { type: 'system_assigned_managed_identity' },
    },
  },
];

let gw: TestGateway;
let key: string;

beforeAll(async () => {
  gw = await startGateway({ catalogue });
  key = (await gw.createKey({ rateLimitRpm: 10_000 })).key;
}, 60_000);
afterAll(() => gw?.close());
beforeEach(() => resetProviders(gw.sim));

const calls = () => (gw.sim.providers['azure']?.stats().total ?? 0) + (gw.sim.providers['scaleway']?.stats().total ?? 0);

async function chat(base: string, body: Record<string, unknown>) {
  const res = await fetch(`${base}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-gateway-provider': 'azure' },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Résume le contrat' }], max_tokens: 16, ...body }),
  });
  return { status: res.status, body: (await res.json()) as { error?: { code: string; param: string | null; message: string } } };
}

describe("Azure's data_sources", () => {
  it('is refused in both variants, streamed or not, and no provider is called', async () => {
    for (const [base, code] of [
      [gw.baseA, 'validation_error'],
      [gw.baseB, 'invalid_request'],
    ] as const) {
      for (const stream of [false, true]) {
        const res = await chat(base, { data_sources: ON_YOUR_DATA, stream });
        expect(res.status).toBe(400);
        expect(res.body.error?.code).toBe(code);
        expect(res.body.error?.param).toBe('data_sources');
      }
    }
    expect(calls()).toBe(0);
  });

  it('as null, means none: the request is served', async () => {
    const res = await chat(gw.baseA, { data_sources: null });
    expect(res.status).toBe(200);
    expect(gw.sim.providers['azure']?.stats().byEndpoint['chat']).toBe(1);
  });
});
