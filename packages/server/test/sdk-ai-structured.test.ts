import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { APICallError, embed, embedMany, generateObject, generateText, stepCountIs, streamObject, streamText, tool } from 'ai';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { resetProviders, type TestGateway } from './helpers/gateway.js';
import { aiSdkGatewayPerFile } from './helpers/sdk.js';

// The AI SDK (`ai` with @ai-sdk/openai-compatible, structured outputs on) through both variants: objects from a
// schema, whole and streamed; embeddings one and many, with a size asked through providerOptions; tool calls run to
// an answer with stopWhen.
let gw: TestGateway;
let key: string;

aiSdkGatewayPerFile((started) => ({ gw, key } = started));

const Person = z.object({ name: z.string(), age: z.number(), hobbies: z.array(z.string()) });

function provider(base: string, apiKey = key) {
  return createOpenAICompatible({ name: 'gw', baseURL: base, apiKey, includeUsage: true, supportsStructuredOutputs: true });
}

function weather(calls: string[]) {
  return {
    weather: tool({
      description: 'The weather in a city',
      inputSchema: z.object({ city: z.string() }),
      execute: async ({ city }) => {
        calls.push(city);
        return { temp: 20 };
      },
    }),
  };
}

describe.each([
  ['A', () => gw.baseA],
  ['B', () => gw.baseB],
])('variant %s through the AI SDK', (_v, base) => {
  const chat = () => provider(base()).chatModel('mistral/small');

  it('generateObject and streamObject answer the schema, which reaches the provider as json_schema', async () => {
    resetProviders(gw.sim);
    const whole = await generateObject({ model: chat(), schema: Person, schemaName: 'person', prompt: 'Describe a person' });
    expect(Person.safeParse(whole.object).success).toBe(true);
    expect(whole.finishReason).toBe('stop');
    expect(whole.usage.totalTokens).toBeGreaterThan(0);
    const sent = gw.sim.providers['scaleway']?.stats().last?.body as { response_format?: { type: string; json_schema: { name: string; schema: unknown } } };
    expect(sent.response_format?.type).toBe('json_schema');
    expect(sent.response_format?.json_schema.name).toBe('person');
    expect(sent.response_format?.json_schema.schema).toMatchObject({ type: 'object', required: ['name', 'age', 'hobbies'] });

    const streamed = streamObject({ model: chat(), schema: Person, schemaName: 'person', prompt: 'Describe a person' });
    const partials: unknown[] = [];
    for await (const partial of streamed.partialObjectStream) partials.push(partial);
    const object = await streamed.object;
    expect(partials.length).toBeGreaterThan(1);
    expect(partials.at(-1)).toEqual(object);
    expect(object).toEqual(whole.object);
    expect((await streamed.usage).totalTokens).toBeGreaterThan(0);
  });

  it('embed and embedMany, with dimensions through providerOptions', async () => {
    const model = provider(base()).textEmbeddingModel('mistral/embed');
    const one = await embed({ model, value: 'Bonjour Paris' });
    expect(one.embedding).toHaveLength(1024);
    expect(one.usage.tokens).toBeGreaterThan(0);
    const many = await embedMany({ model, values: ['Bonjour Paris', 'Guten Tag Berlin', 'Hola Madrid'] });
    expect(many.embeddings.map((e) => e.length)).toEqual([1024, 1024, 1024]);
    // In order: the first is the same text's vector, the others are other texts'.
    expect(many.embeddings[0]).toEqual(one.embedding);
    expect(many.embeddings[1]).not.toEqual(one.embedding);
    expect(many.usage.tokens).toBeGreaterThan(one.usage.tokens);
    for (const m of ['mistral/embed', 'baai/bge-m3']) {
      const sized = await embed({ model: provider(base()).textEmbeddingModel(m), value: 'Bonjour Paris', providerOptions: { gw: { dimensions: 128 } } });
      expect(sized.embedding, m).toHaveLength(128);
      const sizedMany = await embedMany({ model: provider(base()).textEmbeddingModel(m), values: ['a', 'b'], providerOptions: { gw: { dimensions: 256 } } });
      expect(
        sizedMany.embeddings.map((e) => e.length),
        m,
      ).toEqual([256, 256]);
    }
  });

  it('generateText with a tool and stopWhen: the tool runs once, its result makes the answer', async () => {
    const calls: string[] = [];
    const result = await generateText({ model: chat(), prompt: 'What is the weather in Paris?', tools: weather(calls), stopWhen: stepCountIs(5) });
    expect(calls).toEqual(['Paris']);
    expect(result.steps.map((s) => s.finishReason)).toEqual(['tool-calls', 'stop']);
    expect(result.steps[0]?.toolCalls.map((c) => [c.toolName, c.input])).toEqual([['weather', { city: 'Paris' }]]);
    expect(result.text).toContain('temp 20');
    // ai 7: `usage` is the sum over the steps (ai 6's was the last step's), more than the last step alone.
    const total = result.steps.reduce((n, s) => n + (s.usage.totalTokens ?? 0), 0);
    expect([result.usage.totalTokens, result.totalUsage.totalTokens]).toEqual([total, total]);
    expect(total).toBeGreaterThan(result.steps.at(-1)?.usage.totalTokens ?? 0);
  });

  it('streamText with a tool and stopWhen: the same, streamed', async () => {
    const calls: string[] = [];
    const result = streamText({ model: chat(), prompt: 'What is the weather in Paris?', tools: weather(calls), stopWhen: stepCountIs(5) });
    const types = new Set<string>();
    for await (const part of result.fullStream) {
      if (part.type === 'error') throw part.error;
      types.add(part.type);
    }
    expect(calls).toEqual(['Paris']);
    expect([...types]).toEqual(expect.arrayContaining(['tool-call', 'tool-result', 'text-delta', 'finish-step', 'finish']));
    expect((await result.steps).map((s) => s.finishReason)).toEqual(['tool-calls', 'stop']);
    expect(await result.text).toContain('temp 20');
    expect(await result.finishReason).toBe('stop');
    // The streamed steps' usage (from the gateway's last chunks) sums to the call's, as whole.
    const steps = await result.steps;
    expect(steps.every((s) => (s.usage.totalTokens ?? 0) > 0)).toBe(true);
    expect((await result.totalUsage).totalTokens).toBe(steps.reduce((n, s) => n + (s.usage.totalTokens ?? 0), 0));
  });

  it('a bad key: APICallError 401 in the variant’s envelope, whole and streamed, not retried', async () => {
    const model = provider(base(), 'gw_live_nope').chatModel('mistral/small');
    const whole = (await generateText({ model, prompt: 'x' }).catch((e: unknown) => e)) as APICallError;
    const parts: unknown[] = [];
    for await (const part of streamText({ model, prompt: 'x', onError: () => {} }).fullStream) if (part.type === 'error') parts.push(part.error);
    for (const err of [whole, ...(parts as APICallError[])]) {
      expect([APICallError.isInstance(err), err.statusCode, err.isRetryable]).toEqual([true, 401, false]);
      expect(JSON.parse(err.responseBody ?? '{}').error.code).toBe(base() === gw.baseA ? 'unauthorized' : 'invalid_api_key');
    }
    expect(parts).toHaveLength(1);
  });
});
