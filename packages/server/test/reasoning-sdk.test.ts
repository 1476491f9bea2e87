import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateText, streamText } from 'ai';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { resetProviders, type TestGateway } from './helpers/gateway.js';
import { aiSdkGatewayPerFile } from './helpers/sdk.js';
import { readSse, type SseEvent, streamRequest } from './helpers/sse.js';

// Reasoning models through the clients their users point at the gateway: @ai-sdk/openai-compatible (which reads
// `reasoning_content`) and the openai SDK, on each provider of the demo catalogue that reasons, in both variants;
// and a stream resumed with Last-Event-ID in the middle of its reasoning.
let gw: TestGateway;
let key: string;

aiSdkGatewayPerFile((started) => ({ gw, key } = started));

/** Each provider that hosts a reasoning model in the demo catalogue, and what it takes to make it reason. */
const REASONING = [
  { model: 'deepseek/r1-distill-70b', provider: 'ovh', effort: undefined, reasoningTokens: true },
  { model: 'deepseek/r1-distill-70b', provider: 'nebius', effort: undefined, reasoningTokens: true },
  // Mistral thinks when asked (reasoning_effort high) and reports no reasoning_tokens: its thinking is in completion_tokens.
  { model: 'mistral/medium', provider: 'mistral', effort: 'high', reasoningTokens: false },
] as const;

/** Reasoning and content of a stream's events, and whether any reasoning came after content. */
function gather(events: SseEvent[]): { reasoning: string; content: string; reasoningAfterContent: boolean } {
  const out = { reasoning: '', content: '', reasoningAfterContent: false };
  for (const e of events) {
    if (e.data === '[DONE]') continue;
    const delta = (JSON.parse(e.data) as { choices: { delta?: { reasoning_content?: string; content?: string } }[] }).choices[0]?.delta;
    if (delta?.reasoning_content) {
      if (out.content !== '') out.reasoningAfterContent = true;
      out.reasoning += delta.reasoning_content;
    }
    if (delta?.content) out.content += delta.content;
  }
  return out;
}

describe.each([
  ['A', () => gw.baseA],
  ['B', () => gw.baseB],
])('variant %s', (_v, base) => {
  it.each(REASONING)('@ai-sdk/openai-compatible: reasoning parts before the text, whole and streamed ($provider)', async (r) => {
    resetProviders(gw.sim);
    const compat = createOpenAICompatible({ name: 'gw', baseURL: base(), apiKey: key, includeUsage: true });
    const ask = {
      model: compat(r.model),
      prompt: 'Why is the sky blue?',
      headers: { 'X-Gateway-Provider': r.provider },
      providerOptions: r.effort ? { gw: { reasoningEffort: r.effort } } : {},
    };
    const whole = await generateText(ask);
    expect(whole.content.map((p) => p.type)).toEqual(['reasoning', 'text']);
    expect(whole.reasoningText).toBe('The user asks about Why is the sky blue. A short direct answer fits best.');
    expect(whole.text).toContain(`Simulated answer from ${r.provider}`);
    if (r.effort) expect(gw.sim.providers[r.provider]?.stats().last?.body).toMatchObject({ reasoning_effort: r.effort });
    // Reasoning is billed as completion tokens; reported apart where the provider reports it.
    expect(whole.usage.outputTokens).toBe(26);
    expect(whole.usage.outputTokenDetails.reasoningTokens).toBe(r.reasoningTokens ? 15 : 0);

    const streamed = streamText(ask);
    const order: string[] = [];
    for await (const part of streamed.fullStream) {
      if (part.type === 'error') throw part.error;
      if (order.at(-1) !== part.type) order.push(part.type);
    }
    expect(order.filter((t) => t.startsWith('reasoning') || t.startsWith('text'))).toEqual([
      'reasoning-start',
      'reasoning-delta',
      'reasoning-end',
      'text-start',
      'text-delta',
      'text-end',
    ]);
    expect(await streamed.reasoningText).toBe(whole.reasoningText);
    expect(await streamed.text).toBe(whole.text);
    expect((await streamed.usage).outputTokens).toBe(26);
  });

  it.each(REASONING)('the openai SDK reads reasoning_content on each delta, before the content, and on the message ($provider)', async (r) => {
    resetProviders(gw.sim);
    const client = new OpenAI({ baseURL: base(), apiKey: key });
    const params = { model: r.model, messages: [{ role: 'user' as const, content: 'Why?' }], ...(r.effort ? { reasoning_effort: r.effort } : {}) };
    const headers = { 'X-Gateway-Provider': r.provider };
    const stream = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } }, { headers });
    let reasoning = '';
    let content = '';
    let completionTokens = 0;
    for await (const chunk of stream) {
      const delta = chunk.choices[0]?.delta as { reasoning_content?: string; content?: string | null } | undefined;
      if (delta?.reasoning_content) {
        expect(content).toBe('');
        reasoning += delta.reasoning_content;
      }
      if (delta?.content) content += delta.content;
      if (chunk.usage) completionTokens = chunk.usage.completion_tokens;
    }
    const whole = await client.chat.completions.create(params, { headers });
    const message = whole.choices[0]?.message as { reasoning_content?: string; content: string | null };
    expect([reasoning, content]).toEqual([message.reasoning_content, message.content]);
    expect(reasoning).toBe('The user asks about Why. A short direct answer fits best.');
    expect(completionTokens).toBe(whole.usage?.completion_tokens);
    expect(whole.usage?.completion_tokens_details?.reasoning_tokens).toBe(r.reasoningTokens ? 11 : undefined);
  });

  it.each(REASONING)('a stream resumed with Last-Event-ID in the middle of its reasoning: nothing lost or doubled ($provider)', async (r) => {
    resetProviders(gw.sim);
    gw.sim.providers[r.provider]?.configure({ chunkGapMs: 20 });
    try {
      const body = { model: r.model, messages: [{ role: 'user', content: 'Why is the sky blue today?' }], stream: true, reasoning_effort: r.effort ?? 'low' };
      const headers = { 'X-Gateway-Provider': r.provider };
      const full = gather(await readSse(await streamRequest(base(), key, body, headers)));
      // The role chunk and three reasoning deltas, then the connection drops.
      const head = await readSse(await streamRequest(base(), key, body, headers), 4);
      expect(gather(head)).toMatchObject({ content: '', reasoning: 'The user asks' });
      const rest = await readSse(await streamRequest(base(), key, body, { 'Last-Event-ID': head.at(-1)?.id as string }));
      expect(rest[0]?.id).toBe(head.at(-1)?.id?.replace(/:4$/, ':5'));
      expect(rest.at(-1)?.data).toBe('[DONE]');
      const joined = gather([...head, ...rest]);
      expect(joined).toEqual(full);
      expect(joined.reasoningAfterContent).toBe(false);
      expect(joined.reasoning).toBe('The user asks about Why is the sky blue today. A short direct answer fits best.');
    } finally {
      gw.sim.providers[r.provider]?.reset();
    }
  });
});
