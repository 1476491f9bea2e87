import type OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import type { RunnableToolFunctionWithParse } from 'openai/lib/RunnableFunction';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { sdkGatewayPerFile } from './helpers/sdk.js';

// The official SDK's helpers on top of chat completions, in both variants: the stream helper's events, the tool
// runner, structured parsing, the raw response, and the retry of a 429 after its Retry-After.
const ctx = sdkGatewayPerFile();
const MODEL = 'mistral/small';
// Pinned, so that a whole and a streamed answer to the same question come from the same provider.
const PINNED = { headers: { 'X-Gateway-Provider': 'scaleway' } };

const variants = [
  ['A', () => ctx.clients.a, () => ctx.gw.baseA],
  ['B', () => ctx.clients.b, () => ctx.gw.baseB],
] as const;

function weatherTool(calls: unknown[]): RunnableToolFunctionWithParse<{ city: string }> {
  return {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The weather in a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false },
      parse: (args: string) => JSON.parse(args) as { city: string },
      function: (args: { city: string }) => {
        calls.push(args);
        return { temp: 20 };
      },
    },
  };
}

describe.each(variants)('variant %s: the OpenAI SDK’s helpers', (_v, client) => {
  it('chat.completions.stream(): content deltas add up to content.done, message and finalChatCompletion, with totalUsage', async () => {
    const messages = [{ role: 'user' as const, content: 'Tell me about Lyon' }];
    const whole = await client().chat.completions.create({ model: MODEL, messages }, PINNED);
    const stream = client().chat.completions.stream({ model: MODEL, messages, stream_options: { include_usage: true } }, PINNED);
    const deltas: string[] = [];
    const done: string[] = [];
    const finished: (string | null | undefined)[] = [];
    let total: OpenAI.CompletionUsage | undefined;
    stream.on('content', (delta) => deltas.push(delta));
    stream.on('content.done', ({ content }) => done.push(content));
    stream.on('message', (m) => finished.push(typeof m.content === 'string' ? m.content : undefined));
    stream.on('totalUsage', (usage) => {
      total = usage;
    });
    const final = await stream.finalChatCompletion();
    const text = final.choices[0]?.message.content;
    expect(deltas.length).toBeGreaterThan(1);
    expect(text).toBe(whole.choices[0]?.message.content);
    expect(deltas.join('')).toBe(text);
    expect(done).toEqual([text]);
    expect(finished).toEqual([text]);
    expect(final.choices[0]?.finish_reason).toBe('stop');
    expect(final.usage?.total_tokens).toBeGreaterThan(0);
    expect(total).toEqual(final.usage);
    expect(await stream.finalContent()).toBe(text);
  });

  it.each([false, true])('runTools (stream: %s) calls the function tool and answers with its result', async (stream) => {
    const calls: unknown[] = [];
    const ask = { model: MODEL, messages: [{ role: 'user' as const, content: 'What is the weather in Paris?' }], tools: [weatherTool(calls)] };
    const runner = stream ? client().chat.completions.runTools({ ...ask, stream }) : client().chat.completions.runTools(ask);
    const answer = await runner.finalContent();
    expect(calls).toEqual([{ city: 'Paris' }]);
    // The provider saw the tool's result: the final answer quotes it.
    expect(answer).toContain('temp 20');
    const [user, asked, result, final] = runner.messages as OpenAI.ChatCompletionMessageParam[];
    expect([user?.role, asked?.role, result?.role, final?.role, runner.messages.length]).toEqual(['user', 'assistant', 'tool', 'assistant', 4]);
    const call = (asked as OpenAI.ChatCompletionAssistantMessageParam).tool_calls?.[0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    expect(call.function.name).toBe('get_weather');
    expect(JSON.parse(call.function.arguments)).toEqual({ city: 'Paris' });
    expect((result as OpenAI.ChatCompletionToolMessageParam).tool_call_id).toBe(call.id);
  });

  it('parse() reads a json_schema answer, plain and with zodResponseFormat', async () => {
    const plain = await client().chat.completions.parse({
      model: MODEL,
      messages: [{ role: 'user', content: 'Describe a person' }],
      response_format: {
        type: 'json_schema',
        json_schema: {
          name: 'person',
          strict: true,
          schema: {
            type: 'object',
            properties: { name: { type: 'string' }, age: { type: 'integer' } },
            required: ['name', 'age'],
            additionalProperties: false,
          },
        },
      },
    });
    const message = plain.choices[0]?.message;
    const person = message?.parsed as { name: string; age: number } | null | undefined;
    expect(person).toEqual(JSON.parse(message?.content ?? 'null'));
    expect(person).toEqual({ name: expect.any(String), age: expect.any(Number) });
    expect(Number.isInteger(person?.age)).toBe(true);

    const Person = z.object({ name: z.string(), age: z.number(), tags: z.array(z.string()), nick: z.string().nullable() });
    const typed = await client().chat.completions.parse({
      model: MODEL,
      messages: [{ role: 'user', content: 'Describe a person' }],
      response_format: zodResponseFormat(Person, 'person'),
    });
    const parsed = typed.choices[0]?.message.parsed;
    expect(Person.safeParse(parsed).success).toBe(true);
    expect(Object.keys(parsed ?? {}).sort()).toEqual(['age', 'name', 'nick', 'tags']);
  });

  it('withResponse() and asResponse() carry the gateway’s headers', async () => {
    const ask = { model: MODEL, messages: [{ role: 'user' as const, content: 'x' }] };
    const { data, response, request_id } = await client().chat.completions.create(ask).withResponse();
    expect(request_id).toMatch(/^req_/);
    expect(response.headers.get('x-request-id')).toBe(request_id);
    expect((data as { _request_id?: string | null })._request_id).toBe(request_id);
    expect(response.headers.get('x-gateway-provider')).toBeTruthy();
    expect(response.headers.get('x-ratelimit-limit')).toBe('10000');
    expect(data.choices[0]?.message.content).toBeTruthy();

    const raw = await client().chat.completions.create(ask, PINNED).asResponse();
    expect(raw.status).toBe(200);
    expect(raw.headers.get('x-gateway-provider')).toBe('scaleway');
    expect(raw.headers.get('content-type')).toContain('application/json');
    const body = (await raw.json()) as OpenAI.ChatCompletion;
    expect(body.id).toMatch(/^chatcmpl-/);
    expect(raw.headers.get('x-request-id')).toMatch(/^req_/);

    const streamed = await client()
      .chat.completions.create({ ...ask, stream: true })
      .withResponse();
    let chunks = 0;
    for await (const _ of streamed.data) chunks++;
    expect(chunks).toBeGreaterThan(1);
    expect(streamed.response.headers.get('content-type')).toContain('text/event-stream');
    expect(streamed.request_id).toMatch(/^req_/);
  });
});
