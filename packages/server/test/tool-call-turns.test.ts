import type { ChatCompletionMessageParam, ChatCompletionTool } from 'openai/resources/chat/completions';
import { describe, expect, it } from 'vitest';
import { sdkGatewayPerFile } from './helpers/sdk.js';

/** Tool-call turns as ctx.clients carry them from one provider to the next: what one answers, the next must take. */

const ctx = sdkGatewayPerFile();

const weather: ChatCompletionTool = {
  type: 'function',
  function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
};
const pin = (provider: string) => ({ headers: { 'X-Gateway-Provider': provider } });

describe("Mistral's tool calls, which come without a type", () => {
  it('are answered typed, so that the SDK runs the tool and Azure takes the call back on the next turn', async () => {
    for (const [variant, client] of Object.entries(ctx.clients)) {
      const messages: ChatCompletionMessageParam[] = [{ role: 'user', content: 'Weather in Paris?' }];
      const first = await client.chat.completions.create(
        { model: 'mistral/small', messages, tools: [weather], tool_choice: 'required', max_tokens: 30 },
        pin('mistral'),
      );
      const call = first.choices[0]?.message.tool_calls?.[0];
      messages.push(first.choices[0]?.message as ChatCompletionMessageParam);
      messages.push({ role: 'tool', tool_call_id: call?.id ?? '', content: '{"temp":12}' });
      // Azure, as OpenAI's API, refuses a tool call of the history without its type.
      const next = await client.chat.completions.create({ model: 'openai/gpt-4o-mini', messages, tools: [weather], max_tokens: 30 }, pin('azure'));
      expect([variant, call?.type, next.choices[0]?.finish_reason]).toEqual([variant, 'function', 'stop']);
    }
  });

  it("are run by the SDK's tool runner", async () => {
    const ran: string[] = [];
    const runner = ctx.clients.a.chat.completions.runTools(
      {
        model: 'mistral/small',
        messages: [{ role: 'user', content: 'Weather in Paris?' }],
        tool_choice: { type: 'function', function: { name: 'get_weather' } },
        max_tokens: 30,
        tools: [
          {
            type: 'function',
            function: {
              name: 'get_weather',
              parameters: weather.function.parameters ?? {},
              function: (args: string) => {
                ran.push(args);
                return '{"temp":12}';
              },
            },
          },
        ],
      },
      pin('mistral'),
    );
    await runner.finalChatCompletion();
    expect(ran).toEqual(['{"city":"Paris"}']);
  });
});
