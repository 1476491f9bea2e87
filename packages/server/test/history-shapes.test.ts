import type { ChatCompletionMessageParam } from 'openai/resources/chat/completions';
import { describe, expect, it } from 'vitest';
import { sdkGatewayPerFile } from './helpers/sdk.js';

/** Conversation histories one provider answers in its own shape, replayed to another that refuses that shape. */

const ctx = sdkGatewayPerFile();

const pin = (provider: string) => ({ headers: { 'X-Gateway-Provider': provider } });
const lastBody = (id: string) => ctx.gw.sim.providers[id]?.stats().last?.body as { messages: Record<string, unknown>[] };

/** POSTs `messages` to the simulated Azure deployment itself. */
async function azureDirect(messages: unknown[]): Promise<{ status: number; body: unknown }> {
  const p = ctx.gw.sim.providers['azure'];
  if (!p) throw new Error('no azure');
  const res = await fetch(`${p.baseUrl}/openai/deployments/gpt-4o-mini/chat/completions?api-version=2024-10-21`, {
    method: 'POST',
    headers: { 'api-key': p.apiKey, 'content-type': 'application/json' },
    body: JSON.stringify({ messages }),
  });
  return { status: res.status, body: await res.json() };
}

describe("Mistral's thinking parts in an assistant message of the history", () => {
  // What Mistral's own API answers with reasoning on, and a client replaying it (Mistral's SDK, a raw history) sends back.
  const mistralAnswer = {
    role: 'assistant',
    content: [
      { type: 'thinking', thinking: [{ type: 'text', text: 'Paris is the capital.' }] },
      { type: 'text', text: 'Paris.' },
    ],
  };
  const history = [{ role: 'user', content: 'Capital of France?' }, mistralAnswer, { role: 'user', content: 'And of Italy?' }];

  it('are refused by the simulated Azure as OpenAI refuses a part type it does not know', async () => {
    const res = await azureDirect(history);
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({
      error: { message: "Invalid value: 'thinking'. Supported values are: 'text' and 'refusal'.", param: 'messages[1].content[0].type' },
    });
  });

  it('are left out for Azure and vLLM hosts as for Mistral, the text kept', async () => {
    for (const [variant, client] of Object.entries(ctx.clients)) {
      for (const [model, provider] of [
        ['openai/gpt-4o-mini', 'azure'],
        ['mistral/small', 'scaleway'],
        ['mistral/small', 'mistral'],
      ] as const) {
        const messages = history as unknown as ChatCompletionMessageParam[];
        const got = await client.chat.completions.create({ model, messages, max_tokens: 20 }, pin(provider));
        const sent = lastBody(provider).messages[1];
        expect([variant, provider, got.choices[0]?.finish_reason, sent]).toEqual([variant, provider, 'stop', { role: 'assistant', content: 'Paris.' }]);
      }
    }
  });

  it('leave other parts as they are, and an answer of thinking alone empty', async () => {
    const parts = [
      { role: 'user', content: 'Capital of France?' },
      {
        role: 'assistant',
        content: [
          { type: 'thinking', thinking: [{ type: 'text', text: 'hmm' }] },
          { type: 'refusal', refusal: 'No.' },
        ],
      },
      { role: 'user', content: 'Why not?' },
      { role: 'assistant', content: [{ type: 'thinking', thinking: [{ type: 'text', text: 'hmm' }] }] },
      { role: 'user', content: 'Well?' },
    ] as unknown as ChatCompletionMessageParam[];
    const got = await ctx.clients.a.chat.completions.create({ model: 'openai/gpt-4o-mini', messages: parts, max_tokens: 20 });
    expect(got.choices[0]?.finish_reason).toBe('stop');
    const sent = lastBody('azure').messages;
    expect([sent[1]?.['content'], sent[3]?.['content']]).toEqual([[{ type: 'refusal', refusal: 'No.' }], '']);
  });
});

describe('an assistant message of the history with an empty tool_calls list', () => {
  // What a vLLM host answers when no tool is called, and what ctx.clients built on such answers send back.
  const history = [
    { role: 'user', content: 'Hello' },
    { role: 'assistant', content: 'Hi!', tool_calls: [] },
    { role: 'user', content: 'How are you?' },
  ];

  it('is refused by the simulated Azure as OpenAI refuses it', async () => {
    const res = await azureDirect(history);
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ error: { param: 'messages[1].tool_calls' } });
  });

  it('is sent without the list, which says no call as its absence does, whole or streamed', async () => {
    for (const [variant, client] of Object.entries(ctx.clients)) {
      const messages = history as ChatCompletionMessageParam[];
      const got = await client.chat.completions.create({ model: 'openai/gpt-4o-mini', messages, max_tokens: 20 });
      expect([variant, got.choices[0]?.finish_reason, lastBody('azure').messages[1]]).toEqual([variant, 'stop', { role: 'assistant', content: 'Hi!' }]);
      const stream = await client.chat.completions.create({ model: 'openai/gpt-4o-mini', messages, max_tokens: 20, stream: true });
      let text = '';
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
      expect(text).not.toBe('');
    }
  });
});
