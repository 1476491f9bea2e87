import type { GatewayFileConfig } from '@gw/schema';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';

// A chat request's body passes to its provider as sent, but for fields that would have the provider act beyond
// answering, with the gateway's account and on the servers all its clients share; those are refused before any call.
// Azure's "On Your Data" (`data_sources`) has Azure search an index or database with the identity of the gateway's
// Azure resource (its managed identity reads the operator's own indexes) and call embedding deployments that the
// request's usage does not count. A client's own `chat_template` is a Jinja template that vLLM and SGLang render on
// the provider's servers, where one that loops for minutes holds the server for every client.

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

async function chat(base: string, body: Record<string, unknown>, provider = 'azure') {
  const res = await fetch(`${base}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-gateway-provider': provider },
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

describe("vLLM's kv_transfer_params", () => {
  it('is refused in both variants, and no provider is called: it would have the provider connect where the client says', async () => {
    const params = { do_remote_prefill: true, remote_host: '10.0.0.7', remote_port: 5557, remote_engine_id: 'x' };
    for (const [base, code] of [
      [gw.baseA, 'validation_error'],
      [gw.baseB, 'invalid_request'],
    ] as const) {
      const res = await chat(base, { kv_transfer_params: params }, 'scaleway');
      expect(res.status).toBe(400);
      expect(res.body.error?.code).toBe(code);
      expect(res.body.error?.param).toBe('kv_transfer_params');
    }
    expect(calls()).toBe(0);
  });
});

describe("Azure's stored completions", () => {
  it('are not asked for: store and metadata stay with the gateway, and the request is served', async () => {
    const res = await chat(gw.baseA, { store: true, metadata: { user: 'alice@example.com' } });
    expect(res.status).toBe(200);
    const sent = gw.sim.providers['azure']?.stats().last?.body as Record<string, unknown>;
    expect(sent['messages']).toBeDefined();
    expect(sent).not.toHaveProperty('store');
    expect(sent).not.toHaveProperty('metadata');
  });
});

const LOOPING = '{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}';

describe("a client's chat template", () => {
  it('is refused, alone or in chat_template_kwargs, in both variants, and no provider is called', async () => {
    for (const [base, code] of [
      [gw.baseA, 'validation_error'],
      [gw.baseB, 'invalid_request'],
    ] as const) {
      for (const [body, param] of [
        [{ chat_template: LOOPING }, 'chat_template'],
        [{ chat_template_kwargs: { enable_thinking: false, chat_template: LOOPING } }, 'chat_template_kwargs.chat_template'],
      ] as const) {
        const res = await chat(base, { ...body, stream: true }, 'scaleway');
        expect(res.status).toBe(400);
        expect(res.body.error?.code).toBe(code);
        expect(res.body.error?.param).toBe(param);
      }
    }
    expect(calls()).toBe(0);
  });

  it("leaves the template's other arguments to the provider", async () => {
    const res = await chat(gw.baseA, { chat_template_kwargs: { enable_thinking: false } }, 'scaleway');
    expect(res.status).toBe(200);
    expect(gw.sim.providers['scaleway']?.stats().last?.body).toMatchObject({ chat_template_kwargs: { enable_thinking: false } });
  });
});
