import type { ChatCompletionCreateParamsNonStreaming } from 'openai/resources/chat/completions';
import { describe, expect, it } from 'vitest';
import { sdkGatewayPerFile } from './helpers/sdk.js';

/**
 * `tools: []`, which clients send when they have no tool this turn (pydantic-ai, Koog, agent loops that turn tools
 * off for a last answer): OpenAI's API (Azure's) refuses it, vLLM hosts and Mistral take it.
 */

const ctx = sdkGatewayPerFile();

const lastBody = (id: string) => ctx.gw.sim.providers[id]?.stats().last?.body as Record<string, unknown>;
const messages = [{ role: 'user' as const, content: 'Hello there' }];

describe('a chat request with an empty tools list', () => {
  it('is refused by the simulated Azure as OpenAI refuses it', async () => {
    const p = ctx.gw.sim.providers['azure'];
    if (!p) throw new Error('no azure');
    const res = await fetch(`${p.baseUrl}/openai/deployments/gpt-4o-mini/chat/completions?api-version=2024-10-21`, {
      method: 'POST',
      headers: { 'api-key': p.apiKey, 'content-type': 'application/json' },
      body: JSON.stringify({ messages, tools: [] }),
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ error: { message: expect.stringContaining("Invalid 'tools': empty array"), param: 'tools' } });
  });

  it('is answered by every provider, whole and streamed, in both variants: the list and an auto or none tool_choice are not sent', async () => {
    const asks: Partial<ChatCompletionCreateParamsNonStreaming>[] = [{ tools: [] }, { tools: [], tool_choice: 'auto' }, { tools: [], tool_choice: 'none' }];
    for (const [variant, client] of Object.entries(ctx.clients)) {
      for (const [model, provider] of [
        ['openai/gpt-4o-mini', 'azure'],
        ['mistral/small', 'scaleway'],
        ['mistral/small', 'mistral'],
      ] as const) {
        const headers = { 'X-Gateway-Provider': provider };
        for (const ask of asks) {
          const got = await client.chat.completions.create({ model, messages, max_tokens: 20, ...ask }, { headers });
          const sent = lastBody(provider);
          expect([variant, provider, ask, got.choices[0]?.finish_reason, 'tools' in sent, 'tool_choice' in sent]).toEqual([
            variant,
            provider,
            ask,
            'stop',
            false,
            false,
          ]);
          const stream = await client.chat.completions.create({ model, messages, max_tokens: 20, stream: true, ...ask }, { headers });
          let text = '';
          for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
          expect([variant, provider, text]).toEqual([variant, provider, expect.stringContaining('Simulated answer')]);
        }
      }
    }
  });

  it('the functions API alike: an empty functions list is answered, in its shape, without tools', async () => {
    const got = await ctx.clients.a.chat.completions.create({
      model: 'openai/gpt-4o-mini',
      messages,
      max_tokens: 20,
      functions: [],
      function_call: 'auto',
    });
    expect(got.choices[0]?.finish_reason).toBe('stop');
    const sent = lastBody('azure');
    expect(['tools' in sent, 'tool_choice' in sent, 'functions' in sent]).toEqual([false, false, false]);
  });

  it('still refuses what asks for a tool it does not give, as OpenAI does', async () => {
    for (const [variant, client] of Object.entries(ctx.clients)) {
      const code = variant === 'a' ? 'validation_error' : 'invalid_request';
      for (const [ask, param] of [
        [{ tool_choice: 'required' }, 'tool_choice'],
        [{ parallel_tool_calls: false }, 'parallel_tool_calls'],
      ] as const) {
        const err = await client.chat.completions.create({ model: 'openai/gpt-4o-mini', messages, tools: [], ...ask }).catch((e: unknown) => e);
        expect([variant, (err as { status?: number }).status, (err as { error?: unknown }).error]).toEqual([
          variant,
          400,
          expect.objectContaining({ code, param }),
        ]);
      }
    }
  });
});
