import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateText, jsonSchema, stepCountIs, streamText, tool } from 'ai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';

// Demo mode's providers honour `tool_choice` as the real ones do: `required` (Mistral's `any`) or a named function
// forces a tool call on every turn, after a tool result too, so an AI SDK agent loop with a forced choice runs all its
// steps; `auto` answers with text once the tool has answered.
let gw: TestGateway;
let key: string;

beforeAll(async () => {
  gw = await startGateway();
  key = (await gw.createKey({ rateLimitRpm: 10_000 })).key;
}, 60_000);
afterAll(async () => {
  await gw?.close();
});

/** One model per wire format: OpenAI-compatible (Scaleway), Mistral's own API, Azure OpenAI. */
const models = [
  ['meta/llama-3.3-70b', 'scaleway'],
  ['mistral/large', 'mistral'],
  ['openai/gpt-4o-mini', 'azure'],
] as const;

const provider = () => createOpenAICompatible({ name: 'gw', baseURL: gw.baseA, apiKey: key, includeUsage: true });
const city = jsonSchema<{ city: string }>({ type: 'object', properties: { city: { type: 'string' } }, required: ['city'] });
const tools = () => ({
  weather: tool({
    description: 'The weather in a city',
    inputSchema: city,
    execute: async ({ city }) => `sunny in ${city}`,
  }),
  time: tool({
    description: 'The time in a city',
    inputSchema: city,
    execute: async () => '12:00',
  }),
});
const prompt = 'What is the weather in Paris?';

describe('tool_choice holds on every turn of a multi-step run', () => {
  it.each(models)("%s (%s): toolChoice 'required' gets a tool call at every step, after tool results too", async (model, upstream) => {
    const result = await generateText({ model: provider()(model), prompt, tools: tools(), toolChoice: 'required', stopWhen: stepCountIs(3) });
    expect(result.steps).toHaveLength(3);
    for (const step of result.steps) {
      expect(step.finishReason).toBe('tool-calls');
      expect(step.toolCalls).toHaveLength(1);
      expect(step.response.headers?.['x-gateway-provider']).toBe(upstream);
    }
  });

  it.each(models)('%s (%s): a named tool is called at every step, streamed', async (model, upstream) => {
    const result = streamText({
      model: provider()(model),
      prompt,
      tools: tools(),
      toolChoice: { type: 'tool', toolName: 'time' },
      stopWhen: stepCountIs(3),
    });
    await result.consumeStream();
    const steps = await result.steps;
    expect(steps).toHaveLength(3);
    for (const step of steps) {
      expect(step.toolCalls.map((c) => c.toolName)).toEqual(['time']);
      expect(step.response.headers?.['x-gateway-provider']).toBe(upstream);
    }
  });

  it.each(models)("%s (%s): toolChoice 'auto' answers with text once the tool has answered", async (model) => {
    const result = await generateText({ model: provider()(model), prompt, tools: tools(), toolChoice: 'auto', stopWhen: stepCountIs(3) });
    expect(result.steps).toHaveLength(2);
    expect(result.steps[0]?.toolCalls.map((c) => c.toolName)).toEqual(['weather']);
    expect(result.finishReason).toBe('stop');
    expect(result.text).toContain('According to the tool result (sunny in Paris)');
  });
});
