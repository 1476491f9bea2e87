import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';
import { openAiClients } from './helpers/sdk.js';

// OpenAI's deprecated functions API, as the official SDK still sends it: `functions`, then the assistant's
// `function_call` and a `function` message with its result. Every provider gets it as the tools API, and the client
// is answered in the functions API's shape.
let gw: TestGateway;
let a: OpenAI;
let b: OpenAI;

beforeAll(async () => {
  gw = await startGateway();
  const key = await gw.createKey({ rateLimitRpm: 10_000 });
  ({ a, b } = openAiClients(gw, key.key));
}, 60_000);
afterAll(async () => {
  await gw?.close();
});

const PROVIDERS = [
  ['scaleway', 'mistral/small'],
  ['ovh', 'mistral/small'],
  ['nebius', 'meta/llama-3.3-70b'],
  ['mistral', 'mistral/small'],
  ['azure', 'openai/gpt-4o-mini'],
] as const;
const CASES = PROVIDERS.flatMap(([provider, model]) =>
  (['A', 'B'] as const).flatMap((variant) => [false, true].map((stream) => ({ provider, model, variant, stream }))),
);

const getWeather: OpenAI.Chat.ChatCompletionCreateParams.Function = {
  name: 'get_weather',
  description: 'The weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};
const question: OpenAI.ChatCompletionMessageParam = { role: 'user', content: 'What is the weather in Paris?' };

interface Answer {
  content: string | null;
  functionCall: { name: string; arguments: string } | null;
  toolCalls: boolean;
  finish: string | null;
}

async function ask(client: OpenAI, model: string, provider: string, stream: boolean, messages: OpenAI.ChatCompletionMessageParam[]): Promise<Answer> {
  const params = { model, messages, functions: [getWeather], function_call: 'auto' as const };
  const options = { headers: { 'x-gateway-provider': provider } };
  if (!stream) {
    const choice = (await client.chat.completions.create(params, options)).choices[0];
    const m = choice?.message;
    return {
      content: m?.content ?? null,
      functionCall: m?.function_call ?? null,
      toolCalls: m?.tool_calls !== undefined,
      finish: choice?.finish_reason ?? null,
    };
  }
  const answer: Answer = { content: null, functionCall: null, toolCalls: false, finish: null };
  for await (const chunk of await client.chat.completions.create({ ...params, stream: true }, options)) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    const delta = choice.delta;
    if (delta.content) answer.content = (answer.content ?? '') + delta.content;
    if (delta.tool_calls !== undefined) answer.toolCalls = true;
    if (delta.function_call) {
      answer.functionCall ??= { name: '', arguments: '' };
      answer.functionCall.name += delta.function_call.name ?? '';
      answer.functionCall.arguments += delta.function_call.arguments ?? '';
    }
    if (choice.finish_reason) answer.finish = choice.finish_reason;
  }
  return answer;
}

const received = (provider: string) => gw.sim.providers[provider as keyof typeof gw.sim.providers]?.stats().last?.body as Record<string, unknown>;

describe('a two-round functions flow, pinned to each provider', () => {
  it.each(CASES)('$variant, $provider, stream $stream: the call and its result go as tools; the answer comes as a function call', async (c) => {
    const client = c.variant === 'A' ? a : b;

    const first = await ask(client, c.model, c.provider, c.stream, [question]);
    expect(first.toolCalls).toBe(false);
    expect(first.finish).toBe('function_call');
    expect(first.functionCall?.name).toBe('get_weather');
    const args = JSON.parse(first.functionCall?.arguments ?? '') as { city?: unknown };
    expect(typeof args.city).toBe('string');
    const sent = received(c.provider);
    expect(sent['tools']).toEqual([{ type: 'function', function: getWeather }]);
    expect(sent['tool_choice']).toBe('auto');
    expect(sent).not.toHaveProperty('functions');
    expect(sent).not.toHaveProperty('function_call');

    const call = first.functionCall as { name: string; arguments: string };
    const second = await ask(client, c.model, c.provider, c.stream, [
      question,
      { role: 'assistant', content: null, function_call: call },
      { role: 'function', name: 'get_weather', content: 'sunny and warm' },
    ]);
    expect(second.finish).toBe('stop');
    expect(second.functionCall).toBeNull();
    expect(second.content).toContain('sunny and warm');
    const messages = received(c.provider)['messages'] as Record<string, unknown>[];
    const [assistant, result] = messages.slice(-2) as [Record<string, unknown>, Record<string, unknown>];
    expect(assistant).not.toHaveProperty('function_call');
    const calls = assistant['tool_calls'] as { id: string; type: string; function: unknown }[];
    expect(calls).toEqual([{ id: expect.stringMatching(/^[a-zA-Z0-9]{9}$/), type: 'function', function: call }]);
    expect(result).toEqual({ role: 'tool', tool_call_id: calls[0]?.id, content: 'sunny and warm' });
  });

  it.each(['A', 'B'] as const)('%s: a function message without its name is refused, as OpenAI refuses it', async (variant) => {
    const client = variant === 'A' ? a : b;
    const bad = { role: 'function', content: 'sunny' } as unknown as OpenAI.ChatCompletionMessageParam;
    const err = (await client.chat.completions.create({ model: 'mistral/small', messages: [question, bad] }).catch((e: unknown) => e)) as InstanceType<
      typeof OpenAI.APIError
    >;
    expect(err.status).toBe(400);
  });

  it.each(['A', 'B'] as const)('%s: a function_call OpenAI refuses is refused before any provider is called, naming it', async (variant) => {
    const client = variant === 'A' ? a : b;
    const upstream = () => Object.values(gw.sim.providers).reduce((sum, p) => sum + (p?.stats().total ?? 0), 0);
    const before = upstream();
    const other = { name: 'get_time', parameters: { type: 'object', properties: {} } };
    for (const [extra, param, message] of [
      [
        { functions: [getWeather, other], function_call: { name: 'get_forecast' } },
        'function_call.name',
        "'function_call.name' names 'get_forecast', which is not among 'functions' (get_weather, get_time).",
      ],
      [
        { functions: [getWeather], function_call: { name: 'get_forecast' }, stream: true },
        'function_call.name',
        "'function_call.name' names 'get_forecast', which is not among 'functions' (get_weather).",
      ],
      [{ function_call: { name: 'get_weather' } }, 'function_call', "'function_call' names a function, but 'functions' gives none."],
      [
        { functions: [getWeather], function_call: 'get_weather' },
        'function_call',
        `'function_call' must be 'none', 'auto' or {"name": …} naming one of 'functions'.`,
      ],
    ] as const) {
      const params = { model: 'mistral/small', messages: [question], ...extra } as OpenAI.ChatCompletionCreateParamsNonStreaming;
      const err = (await client.chat.completions.create(params).catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
      const code = variant === 'A' ? 'validation_error' : 'invalid_request';
      expect([param, err.status, err.code, err.param, err.message]).toEqual([param, 400, code, param, `400 Invalid body: ${message}`]);
    }
    expect(upstream()).toBe(before);
    // Named among `functions`, it is asked of the provider as the tools API's named choice.
    const named = await client.chat.completions.create(
      { model: 'mistral/small', messages: [question], functions: [getWeather, other], function_call: { name: 'get_weather' } },
      { headers: { 'x-gateway-provider': 'mistral' } },
    );
    expect(named.choices[0]?.message.function_call?.name).toBe('get_weather');
    expect(received('mistral')['tool_choice']).toEqual({ type: 'function', function: { name: 'get_weather' } });
  });
});
