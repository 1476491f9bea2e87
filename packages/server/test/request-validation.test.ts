import OpenAI from 'openai';
import { beforeEach, describe, expect, it } from 'vitest';
import { resetProviders } from './helpers/gateway.js';
import { sdkGatewayPerFile } from './helpers/sdk.js';

// What OpenAI's API refuses with a 400 naming the parameter is refused here too, in each variant's envelope, before any
// provider is asked: a provider may take the value, or refuse it in its own words (Azure's 400 says `param: null`).
const ctx = sdkGatewayPerFile();
beforeEach(() => resetProviders(ctx.gw.sim));

type Params = Omit<OpenAI.Chat.ChatCompletionCreateParamsNonStreaming, 'model' | 'messages'>;
const variants = [
  ['A', 'validation_error'],
  ['B', 'invalid_request'],
] as const;
const client = (variant: 'A' | 'B') => (variant === 'A' ? ctx.clients.a : ctx.clients.b);
// Served by Azure in the demo catalogue: the provider whose own 400s name no parameter.
const MODEL = 'openai/gpt-4o-mini';
const messages = [{ role: 'user' as const, content: 'one two three' }];
const chats = () => Object.values(ctx.gw.sim.providers).reduce((n, p) => n + (p?.stats().byEndpoint.chat ?? 0), 0);

async function refusal(variant: 'A' | 'B', params: Params) {
  const err = await client(variant)
    .chat.completions.create({ model: MODEL, messages, max_tokens: 5, ...params })
    .then(
      () => null,
      (e: unknown) => e,
    );
  if (!(err instanceof OpenAI.BadRequestError)) throw new Error(`expected a 400, got ${String(err)}`);
  return { code: err.code, param: err.param, message: (err.error as { message?: string }).message };
}

async function answered(variant: 'A' | 'B', params: Params) {
  const completion = await client(variant).chat.completions.create({ model: MODEL, messages, max_tokens: 5, ...params });
  // With tools the simulated model may call one instead of answering in text.
  expect(completion.choices[0]?.message.content || completion.choices[0]?.message.tool_calls?.length).toBeTruthy();
}

describe("OpenAI's ranges of the sampling and log-probability fields", () => {
  const cases: [Params, string, string][] = [
    [{ presence_penalty: 2.5 }, 'presence_penalty', "Invalid body: 'presence_penalty' must be <= 2."],
    [{ presence_penalty: -3 }, 'presence_penalty', "Invalid body: 'presence_penalty' must be >= -2."],
    [{ frequency_penalty: 3 }, 'frequency_penalty', "Invalid body: 'frequency_penalty' must be <= 2."],
    [{ frequency_penalty: '1' as unknown as number }, 'frequency_penalty', "Invalid body: 'frequency_penalty' must be number or null."],
    [{ logprobs: true, top_logprobs: 21 }, 'top_logprobs', "Invalid body: 'top_logprobs' must be <= 20."],
    [{ logprobs: true, top_logprobs: -1 }, 'top_logprobs', "Invalid body: 'top_logprobs' must be >= 0."],
    [{ logprobs: true, top_logprobs: 2.5 }, 'top_logprobs', "Invalid body: 'top_logprobs' must be integer or null."],
    [{ logprobs: 'yes' as unknown as boolean }, 'logprobs', "Invalid body: 'logprobs' must be boolean or null."],
    [{ logit_bias: { '50256': 101 } }, 'logit_bias.50256', "Invalid body: 'logit_bias.50256' must be <= 100."],
    [{ logit_bias: { '50256': -100.5 } }, 'logit_bias.50256', "Invalid body: 'logit_bias.50256' must be >= -100."],
    [{ logit_bias: { '50256': '1' as unknown as number } }, 'logit_bias.50256', "Invalid body: 'logit_bias.50256' must be number."],
    [{ logit_bias: { hello: 1 } }, 'logit_bias', 'Invalid body: \'logit_bias\' must have token ids as its keys (whole numbers, such as "50256").'],
  ];
  for (const [variant, code] of variants) {
    it.each(cases)(`${variant}: %j is refused naming %s`, async (params, param, message) => {
      expect(await refusal(variant, params)).toEqual({ code, param, message });
      expect(chats()).toBe(0);
    });
    it(`${variant}: the ends of each range are taken`, async () => {
      await answered(variant, { presence_penalty: 2, frequency_penalty: -2 });
      await answered(variant, { logprobs: true, top_logprobs: 20 });
      await answered(variant, { logit_bias: { '50256': -100, '11': 100 } });
    });
  }
});

describe('stop sequences', () => {
  for (const [variant, code] of variants) {
    it(`${variant}: more than 4 are refused naming stop, as OpenAI refuses them`, async () => {
      expect(await refusal(variant, { stop: ['a', 'b', 'c', 'd', 'e'] })).toEqual({
        code,
        param: 'stop',
        message: "Invalid body: 'stop' must have at most 4 items.",
      });
      expect(await refusal(variant, { stop: ['a', 5 as unknown as string] })).toEqual({
        code,
        param: 'stop.1',
        message: "Invalid body: 'stop.1' must be string.",
      });
      expect(chats()).toBe(0);
    });
    it(`${variant}: one sequence, or up to 4, are taken`, async () => {
      await answered(variant, { stop: 'zzz' });
      await answered(variant, { stop: ['w', 'x', 'y', 'z'] });
    });
  }
});

describe('parallel_tool_calls', () => {
  const tools = [{ type: 'function' as const, function: { name: 'lookup', parameters: { type: 'object', properties: {} } } }];
  for (const [variant, code] of variants) {
    it(`${variant}: without tools it is refused naming parallel_tool_calls, as OpenAI refuses it`, async () => {
      for (const value of [false, true]) {
        expect(await refusal(variant, { parallel_tool_calls: value })).toEqual({
          code,
          param: 'parallel_tool_calls',
          message: "Invalid body: 'parallel_tool_calls' is only allowed when 'tools' are given.",
        });
      }
      expect(await refusal(variant, { parallel_tool_calls: false, tools: [] })).toMatchObject({ code, param: 'parallel_tool_calls' });
      expect(await refusal(variant, { tools, parallel_tool_calls: 'no' as unknown as boolean })).toEqual({
        code,
        param: 'parallel_tool_calls',
        message: "Invalid body: 'parallel_tool_calls' must be boolean or null.",
      });
      expect(chats()).toBe(0);
    });
    it(`${variant}: with tools, or null, it is taken`, async () => {
      await answered(variant, { tools, parallel_tool_calls: false });
      await answered(variant, { parallel_tool_calls: null as unknown as boolean });
    });
  }
});

describe('fields that take one of a list of values', () => {
  for (const [variant, code] of variants) {
    it(`${variant}: a service_tier or verbosity OpenAI does not know is refused naming the field and its values`, async () => {
      expect(await refusal(variant, { service_tier: 'turbo' as 'auto' })).toEqual({
        code,
        param: 'service_tier',
        message: 'Invalid body: \'service_tier\' has a value that is not allowed (allowed: "auto", "default", "flex", "scale", "priority", "fast").',
      });
      expect(await refusal(variant, { verbosity: 'loud' as 'low' })).toEqual({
        code,
        param: 'verbosity',
        message: 'Invalid body: \'verbosity\' has a value that is not allowed (allowed: "low", "medium", "high").',
      });
      expect(chats()).toBe(0);
    });
    it(`${variant}: OpenAI's values are taken`, async () => {
      await answered(variant, { service_tier: 'flex', verbosity: 'low' });
      await answered(variant, { service_tier: 'auto' });
    });
  }
});

describe('seed', () => {
  const INT64 = 'must be a 64-bit integer, from -9223372036854775808 to 9223372036854775807';
  for (const [variant, code] of variants) {
    it(`${variant}: outside int64, or not whole, it is refused naming seed, as OpenAI refuses it`, async () => {
      for (const seed of [1e308, 2 ** 64, -(2 ** 64)]) {
        expect(await refusal(variant, { seed })).toEqual({ code, param: 'seed', message: `Invalid body: 'seed' ${INT64}.` });
      }
      expect(await refusal(variant, { seed: 1.5 })).toEqual({ code, param: 'seed', message: "Invalid body: 'seed' must be integer or null." });
      expect(chats()).toBe(0);
    });
    it(`${variant}: int64's ends, written as a client sends them, are taken and sent on`, async () => {
      const base = variant === 'A' ? ctx.gw.baseA : ctx.gw.baseB;
      // Sent as written (number-fidelity.test.ts reads the bytes); the simulator reads them as doubles, ±2^63.
      for (const [seed, sent] of [
        ['9223372036854775807', 2 ** 63],
        ['-9223372036854775808', -(2 ** 63)],
        ['42', 42],
      ] as const) {
        const res = await fetch(`${base}/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${ctx.clients.a.apiKey}`, 'content-type': 'application/json', 'x-gateway-provider': 'scaleway' },
          body: `{"model":"mistral/small","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"seed":${seed}}`,
        });
        expect([seed, res.status]).toEqual([seed, 200]);
        expect((ctx.gw.sim.providers['scaleway']?.stats().last?.body as { seed?: unknown } | undefined)?.seed).toBe(sent);
      }
    });
  }
});

describe('tools', () => {
  for (const [variant, code] of variants) {
    it(`${variant}: a custom tool is refused naming its type, the field to change`, async () => {
      const custom = { type: 'custom', custom: { name: 'grammar' } } as unknown as OpenAI.Chat.ChatCompletionTool;
      expect(await refusal(variant, { tools: [custom] })).toEqual({
        code,
        param: 'tools.0.type',
        message: 'Invalid body: \'tools.0.type\' has a value that is not allowed (allowed: "function").',
      });
      const bare = { type: 'function' } as unknown as OpenAI.Chat.ChatCompletionTool;
      expect(await refusal(variant, { tools: [bare] })).toEqual({ code, param: 'tools.0.function', message: "Invalid body: 'tools.0.function' is required." });
      expect(chats()).toBe(0);
    });
  }
});

describe("a provider's refusal that names a parameter", () => {
  for (const [variant, code] of variants) {
    it(`${variant}: passes that parameter on as the client's error's param`, async () => {
      // A tool call of the history without its type: Azure refuses it, naming where it is, as OpenAI's API does.
      const history = [
        { role: 'user' as const, content: 'Weather in Paris?' },
        { role: 'assistant' as const, content: null, tool_calls: [{ id: 'call_1', function: { name: 'weather', arguments: '{}' } }] },
        { role: 'tool' as const, tool_call_id: 'call_1', content: 'sunny' },
      ] as unknown as OpenAI.Chat.ChatCompletionMessageParam[];
      const err = await client(variant)
        .chat.completions.create({ model: MODEL, messages: history, max_tokens: 5 })
        .then(
          () => null,
          (e: unknown) => e,
        );
      if (!(err instanceof OpenAI.BadRequestError)) throw new Error(`expected a 400, got ${String(err)}`);
      expect([err.code, err.param]).toEqual([code, 'messages[1].tool_calls[0].type']);
      expect((err.error as { message?: string }).message).toContain("Missing required parameter: 'messages[1].tool_calls[0].type'.");
      expect(ctx.gw.sim.providers.azure?.stats().byEndpoint.chat).toBe(1);
    });
  }
});

describe('a message without its role', () => {
  for (const [variant, code] of variants) {
    it(`${variant}: is refused naming its role, not a field another role requires`, async () => {
      const err = await client(variant)
        .chat.completions.create({
          model: MODEL,
          messages: [messages[0], { content: 'and four' }, { content: 'x', tool_call_id: 'a' }] as unknown as OpenAI.Chat.ChatCompletionMessageParam[],
          max_tokens: 5,
        })
        .then(
          () => null,
          (e: unknown) => e,
        );
      if (!(err instanceof OpenAI.BadRequestError)) throw new Error(`expected a 400, got ${String(err)}`);
      expect({ code: err.code, param: err.param, message: (err.error as { message?: string }).message }).toEqual({
        code,
        param: 'messages.1.role',
        message: "Invalid body: 'messages.1.role' is required.",
      });
      expect(await refusal(variant, { tools: [{} as OpenAI.Chat.ChatCompletionTool] })).toMatchObject({ param: 'tools.0.type' });
      expect(await refusal(variant, { response_format: {} as OpenAI.ResponseFormatText })).toMatchObject({ param: 'response_format.type' });
      expect(chats()).toBe(0);
    });
  }
});
