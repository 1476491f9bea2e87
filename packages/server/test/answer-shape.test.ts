import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';
import { openAiClients } from './helpers/sdk.js';

/**
 * A chat answer has every field OpenAI's SDK types as present (`| null`, not optional), whichever provider served it:
 * a client testing `choice.logprobs !== null` or `message.refusal !== null` must not take `undefined` for a value.
 */
let gw: TestGateway;
let a: OpenAI;
let b: OpenAI;

beforeAll(async () => {
  gw = await startGateway({});
  const { key } = await gw.createKey({ rateLimitRpm: 10_000 });
  ({ a, b } = openAiClients(gw, key));
}, 60_000);
afterAll(() => gw?.close());

const weather: OpenAI.Chat.ChatCompletionTool = {
  type: 'function',
  function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
};

describe('a chat answer served by Mistral has OpenAI’s fields', () => {
  it('each choice has logprobs null and its message refusal null, with text, with reasoning and with a tool call, in both variants', async () => {
    const asks: OpenAI.Chat.ChatCompletionCreateParamsNonStreaming[] = [
      { model: 'mistral/small', messages: [{ role: 'user', content: 'Bonjour' }], n: 2 },
      { model: 'mistral/medium', messages: [{ role: 'user', content: 'Bonjour' }], reasoning_effort: 'high' },
      { model: 'mistral/small', messages: [{ role: 'user', content: 'weather in Paris' }], tools: [weather], tool_choice: 'required' },
    ];
    for (const client of [a, b]) {
      for (const ask of asks) {
        const { data, response } = await client.chat.completions.create(ask, { headers: { 'X-Gateway-Provider': 'mistral' } }).withResponse();
        expect(response.headers.get('x-gateway-provider')).toBe('mistral');
        expect(data.choices.length).toBe(ask.n ?? 1);
        for (const choice of data.choices) {
          expect(choice.logprobs).toBeNull();
          expect(choice.message.refusal).toBeNull();
        }
      }
    }
  });
});

describe('a chat answer served by a vLLM host has OpenAI’s fields', () => {
  it('its message has refusal null, as vLLM answers it, through each host and both variants', async () => {
    const asks: [string, string][] = [
      ['mistral/small', 'scaleway'],
      ['mistral/small', 'ovh'],
      ['meta/llama-3.3-70b', 'nebius'],
      ['deepseek/r1-distill-70b', 'ovh'],
    ];
    for (const client of [a, b]) {
      for (const [model, provider] of asks) {
        const { data, response } = await client.chat.completions
          .create({ model, messages: [{ role: 'user', content: 'Bonjour' }] }, { headers: { 'X-Gateway-Provider': provider } })
          .withResponse();
        expect(response.headers.get('x-gateway-provider')).toBe(provider);
        expect(data.choices[0]?.message.refusal).toBeNull();
        expect(data.choices[0]?.logprobs).toBeNull();
      }
    }
  });
});

describe('a request with both max_tokens and max_completion_tokens', () => {
  it('is cut at max_completion_tokens by Mistral as by the vLLM hosts serving the same model, in both variants', async () => {
    for (const client of [a, b]) {
      const reasons: Record<string, string | null | undefined> = {};
      for (const provider of ['scaleway', 'ovh', 'mistral']) {
        const answer = await client.chat.completions.create(
          { model: 'mistral/small', messages: [{ role: 'user', content: 'Bonjour Paris' }], max_tokens: 2, max_completion_tokens: 200 },
          { headers: { 'X-Gateway-Provider': provider } },
        );
        reasons[provider] = answer.choices[0]?.finish_reason;
        expect(answer.usage?.completion_tokens).toBeGreaterThan(2);
      }
      expect(reasons).toEqual({ scaleway: 'stop', ovh: 'stop', mistral: 'stop' });
    }
  });

  it('is served by Azure, which refuses both at once, cut at max_completion_tokens, in both variants', async () => {
    for (const client of [a, b]) {
      for (const stream of [false, true]) {
        const ask = { model: 'openai/gpt-4o-mini', messages: [{ role: 'user' as const, content: 'Bonjour Paris' }], max_tokens: 200, max_completion_tokens: 2 };
        const finish = stream
          ? await lastFinish(await client.chat.completions.create({ ...ask, stream: true }))
          : (await client.chat.completions.create(ask)).choices[0]?.finish_reason;
        expect(finish).toBe('length');
        const sent = gw.sim.providers.azure.stats().last?.body as Record<string, unknown>;
        expect([sent['max_completion_tokens'], sent['max_tokens']]).toEqual([2, undefined]);
      }
    }
  });
});

describe('max_completion_tokens to an Azure api-version older than 2024-09-01-preview', () => {
  it('is sent as max_tokens, the one cap that version knows, in both variants', async () => {
    const old = await startGateway({
      catalogue: (c) => ({ ...c, providers: c.providers.map((p) => (p.type === 'azure' ? { ...p, apiVersion: '2024-06-01' } : p)) }),
    });
    try {
      const { key } = await old.createKey({ rateLimitRpm: 10_000 });
      const clients = openAiClients(old, key);
      for (const client of [clients.a, clients.b]) {
        for (const caps of [{ max_completion_tokens: 2 }, { max_tokens: 200, max_completion_tokens: 2 }]) {
          const answer = await client.chat.completions.create({ model: 'openai/gpt-4o-mini', messages: [{ role: 'user', content: 'Bonjour Paris' }], ...caps });
          expect(answer.choices[0]?.finish_reason).toBe('length');
          const sent = old.sim.providers.azure.stats().last?.body as Record<string, unknown>;
          expect([sent['max_tokens'], sent['max_completion_tokens']]).toEqual([2, undefined]);
        }
      }
    } finally {
      await old.close();
    }
  });
});

async function lastFinish(stream: AsyncIterable<OpenAI.Chat.ChatCompletionChunk>): Promise<string | null | undefined> {
  let finish: string | null | undefined;
  for await (const chunk of stream) finish = chunk.choices[0]?.finish_reason ?? finish;
  return finish;
}
