import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';

let gw: TestGateway;
let key: string;

beforeAll(async () => {
  gw = await startGateway();
  key = (await gw.createKey({ rateLimitRpm: 10_000 })).key;
}, 60_000);
afterAll(async () => {
  await gw?.close();
});

/** A chat served by La Plateforme (the simulator refuses what Mistral refuses: a last assistant message without `prefix`, an empty one). */
async function chatOnMistral(messages: unknown[], stream = false): Promise<{ status: number; text: string }> {
  const res = await fetch(`${gw.baseA}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-gateway-provider': 'mistral' },
    body: JSON.stringify({ model: 'mistral/small', messages, stream, max_tokens: 20 }),
  });
  return { status: res.status, text: await res.text() };
}

describe('conversations OpenAI takes and Mistral refuses as they are', () => {
  it('a conversation that ends with an assistant message is continued from it, whole or streamed', async () => {
    const messages = [
      { role: 'user', content: 'Name a colour.' },
      { role: 'assistant', content: 'The colour is' },
    ];
    const whole = await chatOnMistral(messages);
    expect([whole.status, whole.text]).toEqual([200, expect.stringContaining('"finish_reason"')]);
    expect(gw.sim.providers['mistral']?.stats().last?.path).toBe('/v1/chat/completions');
    const streamed = await chatOnMistral(messages, true);
    expect([streamed.status, streamed.text.trimEnd().endsWith('data: [DONE]')]).toEqual([200, true]);
  });

  it('an assistant message with neither content nor tool calls (reasoning only, empty) is left out', async () => {
    const res = await chatOnMistral([
      { role: 'user', content: 'Think about it.' },
      { role: 'assistant', content: [{ type: 'thinking', thinking: [{ type: 'text', text: 'hmm' }] }] },
      { role: 'user', content: 'Well?' },
      { role: 'assistant', content: '' },
    ]);
    expect([res.status, res.text]).toEqual([200, expect.stringContaining('"chat.completion"')]);
  });

  it('an assistant message with tool calls at the end is still the client’s 400: its results are missing', async () => {
    const res = await chatOnMistral([
      { role: 'user', content: 'Weather?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'Ab3dE6gH9', type: 'function', function: { name: 'weather', arguments: '{}' } }] },
    ]);
    expect(res.status).toBe(400);
    expect(res.text).toContain('Expected last role User or Tool');
  });
});

describe('reasoning_effort as OpenAI takes it', () => {
  it("takes every value of OpenAI's API and sends Mistral what it knows: none stays none, any other is high", async () => {
    for (const [effort, sent] of [
      ['none', 'none'],
      ['minimal', 'high'],
      ['low', 'high'],
      ['xhigh', 'high'],
      ['max', 'high'],
    ] as const) {
      const res = await fetch(`${gw.baseA}/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-gateway-provider': 'mistral' },
        body: JSON.stringify({ model: 'mistral/small', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 20, reasoning_effort: effort }),
      });
      const body = gw.sim.providers['mistral']?.stats().last?.body as { reasoning_effort?: string } | undefined;
      expect([effort, res.status, body?.reasoning_effort]).toEqual([effort, 200, sent]);
    }
    const wrong = await fetch(`${gw.baseA}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mistral/small', messages: [{ role: 'user', content: 'Hi' }], reasoning_effort: 'extreme' }),
    });
    expect(wrong.status).toBe(400);
    expect(await wrong.text()).toContain('(allowed: \\"none\\", \\"minimal\\", \\"low\\", \\"medium\\", \\"high\\", \\"xhigh\\", \\"max\\")');
  });
});
