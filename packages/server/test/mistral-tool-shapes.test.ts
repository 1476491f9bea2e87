import { zodFunction, zodResponseFormat } from 'openai/helpers/zod';
import type { ChatCompletionMessageParam } from 'openai/resources/chat/completions';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { resetProviders } from './helpers/gateway.js';
import { sdkGatewayPerFile } from './helpers/sdk.js';

/**
 * Tools and tool calls as OpenAI's API takes them, sent to Mistral, whose schema forbids keys it lacks and requires a
 * function's `parameters`: a function without parameters, and the message OpenAI's SDK's `parse()` answers sent back.
 */
const ctx = sdkGatewayPerFile();
const pin = { headers: { 'X-Gateway-Provider': 'mistral' } };

function lastMistralBody(): Record<string, unknown> {
  return ctx.gw.sim.providers['mistral']?.stats().last?.body as Record<string, unknown>;
}

describe('tools sent to Mistral', () => {
  it('a function given without parameters (it takes none) is called, whole and streamed', async () => {
    resetProviders(ctx.gw.sim);
    const tools = [{ type: 'function' as const, function: { name: 'get_time', description: 'The time now' } }];
    for (const [variant, client] of Object.entries(ctx.clients)) {
      const messages: ChatCompletionMessageParam[] = [{ role: 'user', content: 'get_time please' }];
      const whole = await client.chat.completions.create({ model: 'mistral/small', messages, tools, max_tokens: 30 }, pin);
      expect([variant, whole.choices[0]?.finish_reason, whole.choices[0]?.message.tool_calls?.[0]?.function.name]).toEqual([variant, 'tool_calls', 'get_time']);
      expect((lastMistralBody()['tools'] as unknown[])[0]).toEqual({
        type: 'function',
        function: { name: 'get_time', description: 'The time now', parameters: { type: 'object', properties: {} } },
      });
      const streamed = await client.chat.completions.stream({ model: 'mistral/small', messages, tools, max_tokens: 30 }, pin).finalChatCompletion();
      expect([variant, streamed.choices[0]?.finish_reason, streamed.choices[0]?.message.tool_calls?.[0]?.function.name]).toEqual([
        variant,
        'tool_calls',
        'get_time',
      ]);
    }
  });

  it("parse()'s answer sent back as it came (parsed_arguments in its calls) is taken, and the answer parsed", async () => {
    resetProviders(ctx.gw.sim);
    const tools = [zodFunction({ name: 'get_weather', parameters: z.object({ city: z.string() }) })];
    const Answer = z.object({ answer: z.string() });
    for (const [variant, client] of Object.entries(ctx.clients)) {
      const messages: ChatCompletionMessageParam[] = [{ role: 'user', content: 'Weather in Paris?' }];
      const first = await client.chat.completions.parse({ model: 'mistral/small', messages, tools, max_tokens: 30 }, pin);
      const message = first.choices[0]?.message;
      expect(message?.tool_calls?.[0]?.function.parsed_arguments).toEqual({ city: 'Paris' });
      messages.push(message as ChatCompletionMessageParam);
      for (const call of message?.tool_calls ?? []) messages.push({ role: 'tool', tool_call_id: call.id, content: '{"temp":12}' });
      const next = await client.chat.completions.parse(
        { model: 'mistral/small', messages, tools, response_format: zodResponseFormat(Answer, 'answer'), max_tokens: 60 },
        pin,
      );
      expect([variant, Answer.safeParse(next.choices[0]?.message.parsed).success]).toEqual([variant, true]);
      const sent = (lastMistralBody()['messages'] as { tool_calls?: { function: object }[] }[])[1];
      expect(Object.keys(sent?.tool_calls?.[0]?.function ?? {}).sort()).toEqual(['arguments', 'name']);
    }
  });

  it('a json_schema format without its schema (OpenAI takes it as any JSON) goes to Mistral as json_object', async () => {
    resetProviders(ctx.gw.sim);
    for (const [variant, client] of Object.entries(ctx.clients)) {
      const messages: ChatCompletionMessageParam[] = [{ role: 'user', content: 'Some JSON please' }];
      const format = { type: 'json_schema' as const, json_schema: { name: 'anything' } };
      const whole = await client.chat.completions.create({ model: 'mistral/small', messages, response_format: format, max_tokens: 30 }, pin);
      expect([variant, typeof whole.choices[0]?.message.content]).toEqual([variant, 'string']);
      expect(lastMistralBody()['response_format']).toEqual({ type: 'json_object' });
    }
  });
});
