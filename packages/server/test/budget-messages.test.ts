import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { estimatePromptTokens } from '../src/http/routes/chat-completions.js';
import { startGateway, type TestGateway } from './helpers/gateway.js';

let gw: TestGateway;

beforeAll(async () => {
  gw = await startGateway();
}, 30_000);

afterAll(async () => {
  await gw?.close();
});

/** The amount a 402's message names as the request's worst case, in EUR. */
function statedWorstCase(message: string): number {
  const m = /its worst case is €(\d+\.\d+)/.exec(message);
  expect(m, message).not.toBeNull();
  return Number((m as RegExpExecArray)[1]);
}

async function refusal(call: () => Promise<unknown>): Promise<string> {
  const err = await call().then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(OpenAI.APIError);
  expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(402);
  return (err as InstanceType<typeof OpenAI.APIError>).message;
}

describe('402 budget messages', () => {
  it('state the worst case to the store’s precision: a cheap embedding refused by a budget of 0 is not said to cost €0.000000', async () => {
    const { key } = await gw.createKey({ budget: 0 });
    const client = new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 0 });
    const message = await refusal(() => client.embeddings.create({ model: 'baai/bge-m3', input: 'hello' }));
    // Held at one token per 3 characters (2 tokens) at 0.01 EUR per 1M tokens, the dearest offer's prompt price.
    expect(statedWorstCase(message)).toBeCloseTo(2e-8, 15);
  });

  it('do not round a chat request’s worst case to six decimals', async () => {
    const { key } = await gw.createKey({ budget: 1e-7 });
    const client = new OpenAI({ apiKey: key, baseURL: gw.baseB, maxRetries: 0 });
    const messages = [{ role: 'user' as const, content: 'hi' }];
    const message = await refusal(() =>
      client.chat.completions.create({ model: 'mistral/small', max_tokens: 10, messages }, { headers: { 'x-gateway-provider': 'scaleway' } }),
    );
    // Pinned to scaleway, 0.15 / 0.35 EUR per 1M tokens: the prompt as estimated and 10 completion tokens.
    const worst = (estimatePromptTokens({ messages }) * 0.15 + 10 * 0.35) / 1e6;
    expect(statedWorstCase(message)).toBeCloseTo(worst, 15);
  });
});
