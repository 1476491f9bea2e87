import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';
import { openAiClients } from './helpers/sdk.js';

// OpenAI refuses a tool whose function name is not ^[a-zA-Z0-9_-]{1,64}$ with a 400 naming it; so do the providers behind
// the gateway, but only after the budget hold and the upstream call, and a lenient host answers with it (and bills it).
let gw: TestGateway;
let keyId: string;
let a: OpenAI;
let b: OpenAI;

beforeAll(async () => {
  gw = await startGateway();
  const key = await gw.createKey({ rateLimitRpm: 10_000 });
  keyId = key.id;
  ({ a, b } = openAiClients(gw, key.key));
}, 60_000);
afterAll(async () => {
  await gw?.close();
});

const variants = ['A', 'B'] as const;
const client = (variant: 'A' | 'B') => (variant === 'A' ? a : b);
const upstreamCalls = () => Object.values(gw.sim.providers).reduce((sum, p) => sum + (p?.stats().total ?? 0), 0);
/** The key's spend with every usage record written (they are written in batches). */
async function spent(): Promise<number> {
  await gw.gateway.services.usage.flush();
  return (await gw.admin<{ spent: number }>('GET', `/keys/${keyId}`)).body.spent;
}
const messages = [{ role: 'user' as const, content: 'What is the weather in Paris?' }];
const tool = (name: string): OpenAI.ChatCompletionTool => ({
  type: 'function',
  function: { name, parameters: { type: 'object', properties: { city: { type: 'string' } } } },
});

describe("a tool's function name is checked as OpenAI checks it", () => {
  it.each(variants)('%s: a name OpenAI refuses is a 400 naming the tool, before any provider is called or anything billed', async (variant) => {
    const code = variant === 'A' ? 'validation_error' : 'invalid_request';
    const type = variant === 'A' ? 'validation_error' : 'invalid_request_error';
    const calls = upstreamCalls();
    const before = await spent();
    for (const model of ['mistral/small', 'mistral/large', 'openai/gpt-4o-mini']) {
      for (const name of ['get weather', 'weather.get', 'météo', 'x'.repeat(65), '']) {
        for (const stream of [false, true]) {
          const err = await client(variant)
            .chat.completions.create({ model, messages, stream, tools: [tool('ok_name'), tool(name)], tool_choice: 'auto' })
            .then(
              () => null,
              (e: unknown) => e as InstanceType<typeof OpenAI.APIError>,
            );
          expect(err, `${model} '${name}'`).toBeInstanceOf(OpenAI.BadRequestError);
          expect(err?.error, `${model} '${name}'`).toMatchObject({
            code,
            type,
            param: 'tools.1.function.name',
            message: "Invalid body: 'tools.1.function.name' must be 1 to 64 letters, digits, underscores or dashes (no spaces, dots or other characters).",
          });
        }
      }
    }
    expect(upstreamCalls()).toBe(calls);
    expect(await spent()).toBe(before);
  });

  it.each(variants)('%s: names within the rule are answered', async (variant) => {
    for (const name of ['get_weather', 'get-weather-2', 'W'.repeat(64)]) {
      const answer = await client(variant).chat.completions.create({ model: 'mistral/small', messages, tools: [tool(name)], tool_choice: 'required' });
      expect(answer.choices[0]?.message.tool_calls?.[0]).toMatchObject({ function: { name } });
    }
  });
});

describe("a response format's name is checked as OpenAI checks it", () => {
  // As the SDK's zodResponseFormat writes it, without a schema library: parse() reads the answer as JSON all the same.
  const format = (name: string) =>
    ({
      type: 'json_schema',
      json_schema: {
        name,
        strict: true,
        schema: { type: 'object', properties: { name: { type: 'string' }, date: { type: 'string' } }, required: ['name', 'date'], additionalProperties: false },
      },
    }) as const;

  it.each(variants)('%s: a name OpenAI refuses is a 400 naming it, before any provider is called or anything billed', async (variant) => {
    const calls = upstreamCalls();
    const before = await spent();
    for (const model of ['mistral/small', 'mistral/large', 'openai/gpt-4o-mini']) {
      for (const name of ['calendar event', 'event.v2', 'x'.repeat(65)]) {
        const err = await client(variant)
          .chat.completions.parse({ model, messages, response_format: format(name) })
          .then(
            () => null,
            (e: unknown) => e as InstanceType<typeof OpenAI.APIError>,
          );
        expect(err, `${model} '${name}'`).toBeInstanceOf(OpenAI.BadRequestError);
        expect(err?.error, `${model} '${name}'`).toMatchObject({
          param: 'response_format.json_schema.name',
          message:
            "Invalid body: 'response_format.json_schema.name' must be 1 to 64 letters, digits, underscores or dashes (no spaces, dots or other characters).",
        });
      }
    }
    expect(upstreamCalls()).toBe(calls);
    expect(await spent()).toBe(before);
  });

  it.each(variants)('%s: a name within the rule is answered, and parsed by the SDK', async (variant) => {
    const answer = await client(variant).chat.completions.parse({
      model: 'openai/gpt-4o-mini',
      messages,
      response_format: format('calendar_event-v2'),
    });
    expect(answer.choices[0]?.message.parsed).toMatchObject({ name: expect.any(String), date: expect.any(String) });
  });
});
