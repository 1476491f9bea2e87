import type { GatewayFileConfig } from '@gw/schema';
import { type Simulator, startSimulator } from '@gw/simulator';
import type OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { vendorOfHost } from '../src/config/vendor.js';
import { answerFieldsUsed } from '../src/providers/param-compat.js';
import { resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';
import { openAiClients } from './helpers/sdk.js';

const SMALL = 'mistral/small'; // scaleway, ovh, mistral, in that order
const DUO = 'test/nemo'; // mistral, scaleway: the demo's retired mistral/nemo, in service

let sim: Simulator;
let gw: TestGateway;
let a: OpenAI;
let b: OpenAI;

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  // One failure opens a circuit: an offer routed around must not count as one.
  const catalogue = (c: GatewayFileConfig): GatewayFileConfig => {
    const nemo = c.models.find((m) => m.id === 'mistral/nemo');
    if (!nemo) throw new Error('no mistral/nemo in the demo catalogue');
    return { ...c, models: [...c.models, { ...nemo, id: DUO, deprecated: false }] };
  };
  gw = await startGateway({ sim, catalogue, env: { GW_CIRCUIT_FAILURES: '1' } });
  const { key } = await gw.createKey({ rateLimitRpm: 10_000 });
  ({ a, b } = openAiClients(gw, key));
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await sim?.close();
});
beforeEach(() => resetProviders(sim));

type ApiError = InstanceType<typeof OpenAI.APIError>;
type Params = Omit<OpenAI.Chat.ChatCompletionCreateParamsNonStreaming, 'model' | 'messages'>;
const chats = (id: string) => sim.providers[id]?.stats().byEndpoint.chat ?? 0;
const lastBody = (id: string) => sim.providers[id]?.stats().last?.body as Record<string, unknown>;
const messages = [{ role: 'user' as const, content: 'Which fields pass?' }];
const variants = () =>
  [
    ['A', a],
    ['B', b],
  ] as const;

async function ask(client: OpenAI, model: string, params: Params, headers: Record<string, string> = {}) {
  const { data, response } = await client.chat.completions.create({ model, messages, ...params }, { headers }).withResponse();
  return { data, provider: response.headers.get('x-gateway-provider'), hops: response.headers.get('x-gateway-routing-hops') };
}

const fail = (client: OpenAI, model: string, params: Params, headers: Record<string, string> = {}) =>
  client.chat.completions.create({ model, messages, ...params }, { headers }).then(
    () => {
      throw new Error('expected an error');
    },
    (e: unknown) => e as ApiError,
  );

describe('the simulated Scaleway refuses what Scaleway documents as unsupported', () => {
  it('answers 400 in its own envelope for n, frequency_penalty, top_logprobs, logit_bias and user', async () => {
    const p = sim.providers.scaleway;
    if (!p) throw new Error('no scaleway');
    for (const [field, value] of [
      ['n', 2],
      ['frequency_penalty', 0.5],
      ['top_logprobs', 2],
      ['logit_bias', { '50256': -100 }],
      ['user', 'u-1'],
    ] as const) {
      const res = await fetch(`${p.baseUrl}/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${p.apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'mistral-small-3.2-24b-instruct-2506', messages, [field]: value }),
      });
      expect(res.status).toBe(400);
      expect(await res.json()).toEqual({
        error: { message: `Parameter '${field}' is not supported.`, type: 'invalid_request_error', param: field, code: 400 },
      });
    }
  });
});

describe('fields that do not change the answer', () => {
  it('are left out for a provider that refuses them, with neutral values of the others', async () => {
    for (const [, client] of variants()) {
      const got = await ask(
        client,
        SMALL,
        { user: 'end-user-7', n: 1, frequency_penalty: 0, top_logprobs: 0, logit_bias: {} },
        { 'X-Gateway-Provider': 'scaleway' },
      );
      expect(got.provider).toBe('scaleway');
      expect(got.data.choices[0]?.message.content).toBeTruthy();
      const sent = lastBody('scaleway');
      for (const key of ['user', 'n', 'frequency_penalty', 'top_logprobs', 'logit_bias']) expect(sent).not.toHaveProperty(key);
    }
  });

  it('are still sent to a provider that takes them', async () => {
    await ask(b, SMALL, { user: 'end-user-7', frequency_penalty: 0.5 }, { 'X-Gateway-Provider': 'ovh' });
    expect(lastBody('ovh')).toMatchObject({ user: 'end-user-7', frequency_penalty: 0.5 });
  });
});

describe('fields that change the answer', () => {
  it('route around a provider that refuses them, which is neither attempted nor penalised', async () => {
    for (const [, client] of variants()) {
      const got = await ask(client, SMALL, { n: 2, frequency_penalty: 0.5 });
      expect(got.provider).toBe('ovh');
      expect(got.hops).toBe(client === b ? '0' : null);
      expect(lastBody('ovh')).toMatchObject({ n: 2, frequency_penalty: 0.5 });
    }
    expect(chats('scaleway')).toBe(0);
    // Its circuit opens after one failure: the next request that uses no such field still goes to scaleway first.
    expect((await ask(b, SMALL, {})).provider).toBe('scaleway');
  });

  it('route around in a stream too', async () => {
    for (const [, client] of variants()) {
      const stream = await client.chat.completions.create(
        { model: SMALL, messages, stream: true, logprobs: true, top_logprobs: 2 },
        { headers: { 'X-Gateway-Provider-Prefer': 'mistral' } },
      );
      let text = '';
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
      expect(text).not.toBe('');
    }
    // Mistral refuses logprobs, Scaleway top_logprobs: only OVH takes both.
    expect(chats('mistral') + chats('scaleway')).toBe(0);
    expect(chats('ovh')).toBe(2);
  });

  it('answer 400 naming the field and the model when no provider of the model takes it', async () => {
    for (const [name, client] of variants()) {
      const err = await fail(client, DUO, { logit_bias: { '1000': 5 } });
      expect([err.status, err.code, err.param]).toEqual([400, name === 'A' ? 'validation_error' : 'invalid_request', 'logit_bias']);
      expect(err.message).toBe("400 'logit_bias' is not supported by any provider serving 'test/nemo'.");
    }
    expect(chats('mistral') + chats('scaleway')).toBe(0);
  });

  it('record no usage for a request refused for a field, as for any body refused', async () => {
    const { key, id } = await gw.createKey({ rateLimitRpm: 10_000 });
    const { a: own } = openAiClients(gw, key);
    expect((await fail(own, DUO, { logit_bias: { '1000': 5 } })).status).toBe(400);
    expect((await fail(own, SMALL, { n: 3 }, { 'X-Gateway-Provider': 'scaleway' })).status).toBe(400);
    // A request answered after them is recorded: the store was written, and the refusals are not in it.
    await ask(own, SMALL, {});
    await gw.gateway.services.usage.flush();
    const rows = await gw.gateway.services.store.usage.list({ keyId: id });
    expect(rows.map((r) => [r.status, r.model])).toEqual([[200, SMALL]]);
  });

  it('answer 400 when the pinned provider refuses it', async () => {
    for (const [name, client] of variants()) {
      const err = await fail(client, SMALL, { n: 3 }, { 'X-Gateway-Provider': 'scaleway' });
      expect([err.status, err.code, err.param]).toEqual([400, name === 'A' ? 'validation_error' : 'invalid_request', 'n']);
      expect(err.message).toBe("400 'n' greater than 1 is not supported by 'scaleway', the provider X-Gateway-Provider pins 'mistral/small' to.");
    }
    expect(chats('scaleway')).toBe(0);
  });

  it('route a temperature above 1.5 (OpenAI’s range, past Mistral’s) around Mistral, and refuse it where only Mistral serves the model', async () => {
    for (const [name, client] of variants()) {
      const got = await ask(client, SMALL, { temperature: 1.8 }, { 'X-Gateway-Provider-Prefer': 'mistral' });
      expect(got.provider).not.toBe('mistral');
      expect(got.data.choices[0]?.message.content).toBeTruthy();
      const err = await fail(client, 'mistral/large', { temperature: 1.8 });
      expect([err.status, err.code, err.param]).toEqual([400, name === 'A' ? 'validation_error' : 'invalid_request', 'temperature']);
      expect(err.message).toBe("400 'temperature' above 1.5 is not supported by any provider serving 'mistral/large'.");
    }
    expect(chats('mistral')).toBe(0);
    // Up to 1.5 Mistral takes it, and gets it as asked.
    expect((await ask(a, SMALL, { temperature: 1.5 }, { 'X-Gateway-Provider': 'mistral' })).provider).toBe('mistral');
    expect(lastBody('mistral')).toMatchObject({ temperature: 1.5 });
  });

  it('names each refusal when no single field is refused everywhere', async () => {
    const err = await fail(a, DUO, { n: 2, logprobs: true });
    expect(err.message).toBe("400 'logprobs' together with 'n' greater than 1 is not supported by any provider serving 'test/nemo'.");
  });
});

describe('a conversation whose last message is system or developer, which Mistral refuses and its other hosts take', () => {
  const ending = (role: 'system' | 'developer') => [
    { role: 'user' as const, content: 'Bonjour' },
    { role, content: 'Answer in French.' },
  ];

  it('is routed around Mistral, with no attempt there, to another host of the model, whole or streamed', async () => {
    for (const [, client] of variants()) {
      for (const role of ['system', 'developer'] as const) {
        // test/nemo is served by Mistral first, then Scaleway.
        const { data, response } = await client.chat.completions.create({ model: DUO, messages: ending(role), max_tokens: 20 }).withResponse();
        expect([role, response.headers.get('x-gateway-provider'), data.choices[0]?.finish_reason]).toEqual([role, 'scaleway', 'stop']);
      }
      const stream = await client.chat.completions.create({ model: DUO, messages: ending('system'), max_tokens: 20, stream: true });
      let text = '';
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
      expect(text).not.toBe('');
    }
    expect(chats('mistral')).toBe(0);
  });

  it("answers the gateway's own 400 where only Mistral serves the model, or the request pins it to Mistral", async () => {
    for (const [name, client] of variants()) {
      const code = name === 'A' ? 'validation_error' : 'invalid_request';
      const only = await client.chat.completions.create({ model: 'mistral/large', messages: ending('developer') }).catch((e: unknown) => e as ApiError);
      expect([only.status, only.code, only.param]).toEqual([400, code, 'messages']);
      expect(only.message).toBe("400 A conversation whose last message is 'system' or 'developer' is not supported by any provider serving 'mistral/large'.");
      const pinned = await client.chat.completions
        .create({ model: SMALL, messages: ending('system') }, { headers: { 'X-Gateway-Provider': 'mistral' } })
        .catch((e: unknown) => e as ApiError);
      expect([pinned.status, pinned.param]).toEqual([400, 'messages']);
      expect(pinned.message).toContain("by 'mistral', the provider X-Gateway-Provider pins 'mistral/small' to.");
    }
    expect(chats('mistral')).toBe(0);
    // A system message before the last user message is Mistral's as ever.
    const { response } = await a.chat.completions
      .create({ model: DUO, messages: [{ role: 'system', content: 'Be brief.' }, ...messages], max_tokens: 20 })
      .withResponse();
    expect(response.headers.get('x-gateway-provider')).toBe('mistral');
  });
});

describe('a user or system message right after a tool result, which Mistral refuses (code 3230) and its other hosts take', () => {
  type Message = OpenAI.Chat.ChatCompletionMessageParam;
  const call = { id: 'call_weather1', type: 'function' as const, function: { name: 'weather', arguments: '{"city":"Paris"}' } };
  const toolTurn: Message[] = [
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: null, tool_calls: [call] },
    { role: 'tool', tool_call_id: call.id, content: 'Sunny, 21 °C' },
  ];
  const next: Message = { role: 'user', content: 'And tomorrow?' };
  const shapes: [string, Message[]][] = [
    ['user after tool', [...toolTurn, next]],
    ['system after tool', [...toolTurn, { role: 'system', content: 'Answer in French.' }, next]],
    // The functions API's result is sent as a tool result.
    [
      'user after function',
      [
        toolTurn[0] as Message,
        { role: 'assistant', content: null, function_call: { name: 'weather', arguments: '{}' } },
        { role: 'function', name: 'weather', content: 'Sunny' },
        next,
      ],
    ],
  ];

  it('is refused by the simulated Mistral as Mistral refuses it', async () => {
    const mistral = sim.providers.mistral;
    if (!mistral) throw new Error('no mistral');
    const res = await fetch(`${mistral.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${mistral.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'mistral-small-latest',
        messages: [
          { role: 'user', content: 'Weather in Paris?' },
          { role: 'assistant', content: '', tool_calls: [{ id: 'abcDEF123', type: 'function', function: { name: 'weather', arguments: '{}' } }] },
          { role: 'tool', tool_call_id: 'abcDEF123', content: 'Sunny' },
          next,
        ],
      }),
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({
      object: 'error',
      message: "Unexpected role 'user' after role 'tool'",
      type: 'invalid_request_message_order',
      param: null,
      code: '3230',
    });
  });

  it('is routed around Mistral, with no attempt there, to another host of the model, whole or streamed', async () => {
    for (const [name, client] of variants()) {
      for (const [shape, conversation] of shapes) {
        // test/nemo is served by Mistral first, then Scaleway.
        const { data, response } = await client.chat.completions.create({ model: DUO, messages: conversation, max_tokens: 20 }).withResponse();
        expect([name, shape, response.headers.get('x-gateway-provider'), data.choices[0]?.finish_reason]).toEqual([name, shape, 'scaleway', 'stop']);
      }
      const stream = await client.chat.completions.create({ model: DUO, messages: [...toolTurn, next], max_tokens: 20, stream: true });
      let text = '';
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
      expect(text).not.toBe('');
    }
    expect(chats('mistral')).toBe(0);
    // A tool result answered by the assistant before the next user message is Mistral's as ever.
    const answered: Message[] = [...toolTurn, { role: 'assistant', content: 'Sunny, 21 °C.' }, next];
    const { response } = await a.chat.completions.create({ model: DUO, messages: answered, max_tokens: 20 }).withResponse();
    expect(response.headers.get('x-gateway-provider')).toBe('mistral');
  });

  it('is routed around Mistral too where an assistant message Mistral is not sent (it says nothing) sits between', async () => {
    // A reasoning model's answer replayed with its thinking alone, or an empty answer: Mistral's adapter leaves it out.
    const silent: Message[] = [
      { role: 'assistant', content: '' },
      { role: 'assistant', content: [{ type: 'thinking', thinking: [{ type: 'text', text: 'Sunny it is.' }] }] } as unknown as Message,
      { role: 'assistant', content: [{ type: 'text', text: '' }] },
    ];
    for (const [name, client] of variants()) {
      for (const [i, quiet] of silent.entries()) {
        const messages = [...toolTurn, quiet, next];
        const whole = await client.chat.completions.create({ model: DUO, messages, max_tokens: 20 }).withResponse();
        expect([name, i, whole.response.headers.get('x-gateway-provider'), whole.data.choices[0]?.finish_reason]).toEqual([name, i, 'scaleway', 'stop']);
        const streamed = await client.chat.completions.create({ model: DUO, messages, max_tokens: 20, stream: true }).withResponse();
        let text = '';
        for await (const chunk of streamed.data) text += chunk.choices[0]?.delta.content ?? '';
        expect([name, i, streamed.response.headers.get('x-gateway-provider'), text !== '']).toEqual([name, i, 'scaleway', true]);
      }
    }
    expect(chats('mistral')).toBe(0);
    // An assistant message that says something, or calls a tool, is sent to Mistral, which takes the order.
    const said: Message[] = [...toolTurn, { role: 'assistant', content: [{ type: 'text', text: 'Sunny.' }] }, next];
    const { response } = await a.chat.completions.create({ model: DUO, messages: said, max_tokens: 20 }).withResponse();
    expect(response.headers.get('x-gateway-provider')).toBe('mistral');
  });

  it("passes Mistral's 400 on as the client's 400 where only Mistral serves the model, or the request pins it to Mistral", async () => {
    for (const [name, client] of variants()) {
      const code = name === 'A' ? 'validation_error' : 'invalid_request';
      const only = await client.chat.completions.create({ model: 'mistral/large', messages: [...toolTurn, next] }).catch((e: unknown) => e as ApiError);
      expect([only.status, only.code]).toEqual([400, code]);
      expect(only.message).toContain("Unexpected role 'user' after role 'tool'");
      const pinned = await client.chat.completions
        .create({ model: SMALL, messages: [...toolTurn, next], stream: true }, { headers: { 'X-Gateway-Provider': 'mistral' } })
        .catch((e: unknown) => e as ApiError);
      expect([pinned.status, pinned.code]).toEqual([400, code]);
      expect(pinned.message).toContain("Unexpected role 'user' after role 'tool'");
    }
    expect(chats('mistral')).toBe(4);
  });
});

describe('the compatibility table', () => {
  it('tells the provider by its host', () => {
    const cases: [string, string][] = [
      ['https://api.scaleway.ai/v1', 'scaleway'],
      ['https://api.scaleway.ai/0b3c6f2e-1111-2222-3333-444455556666/v1', 'scaleway'],
      ['https://oai.endpoints.kepler.ai.cloud.ovh.net/v1', 'ovhcloud'],
      ['https://openai.inference.de-txl.ionos.com/v1', 'ionos'],
      ['https://api.tokenfactory.nebius.com/v1', 'nebius'],
      ['https://api.studio.nebius.ai/v1', 'nebius'],
      ['https://api.cohere.ai/compatibility/v1', 'cohere'],
      ['https://europe-west4-aiplatform.googleapis.com/v1/projects/p/locations/europe-west4/endpoints/openapi', 'vertex'],
      ['http://127.0.0.1:9101/v1', 'generic'],
      ['https://api.scaleway.ai.example.org/v1', 'generic'],
    ];
    for (const [url, vendor] of cases) expect([url, vendorOfHost(new URL(url))]).toEqual([url, vendor]);
  });

  it('counts neutral values as absent', () => {
    expect(
      answerFieldsUsed({ n: 1, logprobs: false, frequency_penalty: 0, presence_penalty: 0, top_logprobs: 0, logit_bias: {}, user: 'u', temperature: 1.5 }),
    ).toBeNull();
    expect(answerFieldsUsed({ n: 2, logprobs: true, presence_penalty: -1, logit_bias: { '1': 1 } })).toEqual([
      'n',
      'logit_bias',
      'logprobs',
      'presence_penalty',
    ]);
  });
});
