import type { GatewayFileConfig } from '@gw/schema';
import { type Simulator, startSimulator } from '@gw/simulator';
import type OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';
import { openAiClients } from './helpers/sdk.js';

/**
 * OpenAI's `developer` role (its newer name for `system`) goes to every OpenAI-compatible host as `system`: none of the
 * EU hosts documents it (Vertex's endpoint lists system, user, assistant, tool and function; PROVIDERS.md 12), and vLLM
 * hands roles to chat templates that may refuse it. No simulator plays Vertex, so an `openai` entry named
 * `vendor: vertex` points at the simulated OVHcloud host; the demo's OVHcloud and Azure models are asked too. The
 * simulators' stats show the body each got.
 */
const MODEL = 'test/vertex-llama';

let sim: Simulator;
let gw: TestGateway;
let a: OpenAI;
let b: OpenAI;

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  const ovh = sim.providers.ovh;
  if (!ovh) throw new Error('no ovh');
  const catalogue = (c: GatewayFileConfig): GatewayFileConfig => ({
    providers: [...c.providers, { id: 'vertex-eu', type: 'openai', vendor: 'vertex', baseUrl: ovh.baseUrl, apiKey: ovh.apiKey, region: 'europe-west4' }],
    models: [
      ...c.models,
      {
        id: MODEL,
        kind: 'chat',
        owned_by: 'meta',
        context_window: 128_000,
        capabilities: ['streaming'],
        offers: [{ provider: 'vertex-eu', upstreamModel: 'Meta-Llama-3_3-70B-Instruct', pricing: { prompt_per_1m: 1, completion_per_1m: 1, currency: 'EUR' } }],
      },
    ],
  });
  gw = await startGateway({ sim, catalogue });
  const { key } = await gw.createKey({ rateLimitRpm: 10_000 });
  ({ a, b } = openAiClients(gw, key));
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await sim?.close();
});
beforeEach(() => resetProviders(sim));

const sentMessages = (provider: string) => (sim.providers[provider]?.stats().last?.body as { messages?: unknown[] } | undefined)?.messages;
/** The model asked, the simulated host that answers it, and the provider the gateway names. */
const hosts = [
  [MODEL, 'ovh', 'vertex-eu'],
  ['openai/gpt-4o-mini', 'azure', 'azure'],
  ['meta/llama-3.3-70b', 'scaleway', 'scaleway'],
  ['meta/llama-3.3-70b', 'nebius', 'nebius'],
] as const;
const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [
  { role: 'system', content: 'You are terse.' },
  { role: 'developer', content: 'Answer in French.', name: 'app' },
  { role: 'user', content: 'Hello' },
  { role: 'developer', content: [{ type: 'text', text: 'No emojis.' }] },
];
const expected = [
  { role: 'system', content: 'You are terse.' },
  { role: 'system', content: 'Answer in French.', name: 'app' },
  { role: 'user', content: 'Hello' },
  { role: 'system', content: [{ type: 'text', text: 'No emojis.' }] },
];
const variants = () =>
  [
    ['A', a],
    ['B', b],
  ] as const;

describe('a developer message to an OpenAI-compatible host', () => {
  it.each(hosts)('%s on %s: is sent as a system message, in its place and with its content', async (model, host, provider) => {
    for (const [, client] of variants()) {
      const { data, response } = await client.chat.completions.create({ model, messages }, { headers: { 'x-gateway-provider': provider } }).withResponse();
      expect(response.status).toBe(200);
      expect(response.headers.get('x-gateway-provider')).toBe(provider);
      expect(data.choices[0]?.message.content).toBeTruthy();
      expect(sentMessages(host)).toEqual(expected);
    }
  });

  it.each(hosts)('%s on %s: is sent as a system message in a stream too', async (model, host, provider) => {
    for (const [, client] of variants()) {
      const { data: stream, response } = await client.chat.completions
        .create({ model, messages, stream: true }, { headers: { 'x-gateway-provider': provider } })
        .withResponse();
      expect(response.status).toBe(200);
      let text = '';
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
      expect(text).not.toBe('');
      expect(sentMessages(host)).toEqual(expected);
    }
  });
});
