import type OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';
import { openAiClients } from './helpers/sdk.js';

// OpenAI's API takes null for these fields as "not given", and its SDKs type them `number | null` (Python sends None
// as null): a client that writes `temperature: settings.temperature ?? null` must get its answer, not a 400.
let gw: TestGateway;
let a: OpenAI;
let b: OpenAI;

beforeAll(async () => {
  gw = await startGateway();
  const { key } = await gw.createKey({ rateLimitRpm: 10_000 });
  ({ a, b } = openAiClients(gw, key));
}, 60_000);
afterAll(async () => {
  await gw?.close();
});
beforeEach(() => resetProviders(gw.sim));

// Named here, the clients picked in the test: it.each reads its table before beforeAll has made them.
const variants = ['A', 'B'] as const;
const client = (variant: 'A' | 'B') => (variant === 'A' ? a : b);
const lastBody = (provider: string) => gw.sim.providers[provider]?.stats().last?.body as Record<string, unknown>;
const messages = [{ role: 'user' as const, content: 'one two three four' }];
/** A model and the provider that serves it, for each adapter the demo catalogue has (vLLM's, Mistral's, Azure's). */
const ONE_PER_ADAPTER = [
  ['mistral/small', 'scaleway'],
  ['mistral/large', 'mistral'],
  ['openai/gpt-4o-mini', 'azure'],
] as const;
const nulls = {
  temperature: null,
  top_p: null,
  n: null,
  max_tokens: null,
  max_completion_tokens: null,
  seed: null,
  reasoning_effort: null,
  stream_options: null,
  // Null from clients that build the body from optional settings (LangChain, LiteLLM, Python's None).
  tools: null,
  tool_choice: null,
  response_format: null,
  stop: null,
  logit_bias: null,
  logprobs: null,
  top_logprobs: null,
  presence_penalty: null,
  frequency_penalty: null,
  user: null,
  metadata: null,
  store: null,
  service_tier: null,
  parallel_tool_calls: null,
  modalities: null,
  prediction: null,
  audio: null,
  web_search_options: null,
} as const;

describe('a null where OpenAI takes one means the field was not given', () => {
  it.each(variants)('%s: every such field null is answered, and no null reaches the provider', async (variant) => {
    for (const [model, provider] of ONE_PER_ADAPTER) {
      const { data, response } = await client(variant)
        // The SDK types a few of them as not nullable (OpenAI's description does not mark them): sent as clients send them.
        .chat.completions.create({ model, messages, stream: null, ...(nulls as unknown as Record<string, undefined>) })
        .withResponse();
      expect(response.headers.get('x-gateway-provider')).toBe(provider);
      expect(data.choices[0]?.finish_reason).toBe('stop');
      const sent = lastBody(provider);
      for (const field of Object.keys(nulls)) expect(sent[field], `${model}: ${field}`).not.toBeNull();
    }
    // The sampling defaults are sent in place of the nulls, as for fields left out.
    await client(variant).chat.completions.create({ model: 'mistral/small', messages, temperature: null, top_p: null });
    expect(lastBody('scaleway')).toMatchObject({ temperature: 1, top_p: 1 });
  });

  it.each(variants)('%s: a conversation read back from answers (tool_calls: null and the other nulls an answer carries) is answered', async (variant) => {
    // What Python's `message.model_dump()` (and LiteLLM) put in the history: every field of an answer's message.
    const readBack = { role: 'assistant', content: 'Paris.', refusal: null, annotations: [], audio: null, function_call: null, tool_calls: null };
    const called = {
      role: 'assistant',
      content: null,
      refusal: null,
      audio: null,
      function_call: null,
      tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }],
    };
    const history = [
      { role: 'user', content: 'capital of France?' },
      readBack,
      { role: 'user', content: 'weather there?' },
      called,
      { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
    ];
    for (const [model, provider] of ONE_PER_ADAPTER) {
      const { data, response } = await client(variant)
        .chat.completions.create({ model, messages: history as unknown as OpenAI.ChatCompletionMessageParam[] })
        .withResponse();
      expect(response.headers.get('x-gateway-provider')).toBe(provider);
      expect(data.choices[0]?.finish_reason).toBe('stop');
      const sent = lastBody(provider)['messages'] as Record<string, unknown>[];
      expect(sent[1], model).not.toHaveProperty('tool_calls');
      expect(sent[1], model).not.toHaveProperty('function_call');
      expect(sent[3]?.['tool_calls'], model).toHaveLength(1);
    }
    // A message that says nothing at all is still refused.
    const err = await client(variant)
      .chat.completions.create({
        model: 'mistral/small',
        messages: [{ role: 'assistant', content: null, tool_calls: null }] as unknown as OpenAI.ChatCompletionMessageParam[],
      })
      .then(
        () => null,
        (e: unknown) => e as InstanceType<typeof OpenAI.APIError>,
      );
    expect(err?.status).toBe(400);
  });

  it.each(variants)('%s: a null max_tokens beside max_completion_tokens leaves the cap to max_completion_tokens', async (variant) => {
    for (const model of ['mistral/large', 'mistral/small']) {
      const answer = await client(variant).chat.completions.create({ model, messages, max_tokens: null, max_completion_tokens: 2 });
      expect(answer.choices[0]?.finish_reason, model).toBe('length');
      expect(answer.usage?.completion_tokens, model).toBe(2);
    }
  });

  it.each(variants)('%s: a stream with null fields streams', async (variant) => {
    const stream = await client(variant).chat.completions.create({
      model: 'mistral/small',
      messages,
      stream: true,
      ...(nulls as unknown as Record<string, undefined>),
      stream_options: { include_usage: true },
    });
    let text = '';
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      usage = chunk.usage ?? usage;
    }
    expect(text).toContain('one two three four');
    expect(usage?.completion_tokens).toBeGreaterThan(0);
  });

  it.each(variants)('%s: a null tools is no tools: a tool call asked for is still refused, naming tool_choice', async (variant) => {
    const err = await client(variant)
      .chat.completions.create({ model: 'mistral/small', messages, tools: null as unknown as undefined, tool_choice: 'required' })
      .then(
        () => null,
        (e: unknown) => e as InstanceType<typeof OpenAI.APIError>,
      );
    expect(err?.status).toBe(400);
    expect(err?.error).toMatchObject({ param: 'tool_choice' });
  });

  it.each(variants)('%s: a value of the wrong type is still refused, naming the field', async (variant) => {
    const err = await client(variant)
      .chat.completions.create({ model: 'mistral/small', messages, temperature: '0.5' as unknown as number })
      .then(
        () => null,
        (e: unknown) => e as InstanceType<typeof OpenAI.APIError>,
      );
    expect(err?.status).toBe(400);
    expect(err?.error).toMatchObject({ param: 'temperature', message: "Invalid body: 'temperature' must be number or null." });
    const bounded = await client(variant)
      .chat.completions.create({ model: 'mistral/small', messages, top_p: 1.5 })
      .then(
        () => null,
        (e: unknown) => e as InstanceType<typeof OpenAI.APIError>,
      );
    expect(bounded?.error).toMatchObject({ param: 'top_p', message: "Invalid body: 'top_p' must be <= 1." });
    const tools = await client(variant)
      .chat.completions.create({ model: 'mistral/small', messages, tools: {} as unknown as [] })
      .then(
        () => null,
        (e: unknown) => e as InstanceType<typeof OpenAI.APIError>,
      );
    expect(tools?.error).toMatchObject({ param: 'tools', message: "Invalid body: 'tools' must be array or null." });
  });
});
