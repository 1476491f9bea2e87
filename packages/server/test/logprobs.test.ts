import type OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';
import { openAiClients } from './helpers/sdk.js';

// `logprobs` (with `top_logprobs`) on the providers that take it, relayed as they answer, streamed or not.

let gw: TestGateway;
let key: string;
let a: OpenAI;
let b: OpenAI;

beforeAll(async () => {
  gw = await startGateway();
  key = (await gw.createKey({ rateLimitRpm: 1000 })).key;
  ({ a, b } = openAiClients(gw, key));
}, 60_000);
afterAll(() => gw?.close());
beforeEach(() => resetProviders(gw.sim));

const messages = [{ role: 'user' as const, content: 'Name three rivers of France, briefly' }];
type Logprob = OpenAI.ChatCompletionTokenLogprob;

/** What the provider answers, asked directly with the body the gateway sent it. */
async function providerAnswer(provider: string): Promise<{ choices: { logprobs: { content: Logprob[] } }[] }> {
  const p = gw.sim.providers[provider];
  if (!p) throw new Error(provider);
  const sent = p.stats().last?.body as Record<string, unknown>;
  const res = await fetch(`${p.baseUrl}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${p.apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ ...sent, stream: false, stream_options: undefined }),
  });
  expect(res.status).toBe(200);
  return (await res.json()) as { choices: { logprobs: { content: Logprob[] } }[] };
}

function expectWellFormed(content: Logprob[], text: string, top: number): void {
  expect(content.length).toBeGreaterThan(1);
  expect(content.map((t) => t.token).join('')).toBe(text);
  for (const t of content) {
    expect(t.logprob).toBeLessThan(0);
    expect(Buffer.from(t.bytes ?? []).toString('utf8')).toBe(t.token);
    expect(t.top_logprobs).toHaveLength(top);
    if (top > 0) expect(t.top_logprobs[0]).toEqual({ token: t.token, logprob: t.logprob, bytes: t.bytes });
    expect(t.top_logprobs.reduce((sum, alt) => sum + Math.exp(alt.logprob), 0)).toBeLessThanOrEqual(1);
  }
}

/** The non-streamed answer's logprobs, then the stream's, which must be the same tokens chunk by chunk. */
async function bothWays(client: OpenAI, body: OpenAI.ChatCompletionCreateParamsNonStreaming, provider: string, top: number) {
  const { data: whole, response } = await client.chat.completions.create(body).withResponse();
  expect(response.headers.get('x-gateway-provider')).toBe(provider);
  const text = whole.choices[0]?.message.content as string;
  const content = whole.choices[0]?.logprobs?.content as Logprob[];
  expectWellFormed(content, text, top);

  const stream = await client.chat.completions.create({ ...body, stream: true });
  const streamed: Logprob[] = [];
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    const lp = choice?.logprobs?.content ?? [];
    // Each content chunk carries the logprob of the token it brings.
    if (choice?.delta.content) expect(lp.map((t) => t.token).join('')).toBe(choice.delta.content);
    streamed.push(...lp);
  }
  expect(streamed).toEqual(content);
  return content;
}

describe('logprobs through the gateway', () => {
  it('a vLLM host (OVH, for top_logprobs, which Scaleway refuses) answers them, relayed unchanged in variant A', async () => {
    const body = { model: 'meta/llama-3.3-70b', messages, logprobs: true, top_logprobs: 3 };
    const content = await bothWays(a, body, 'ovh', 3);
    expect((await providerAnswer('ovh')).choices[0]?.logprobs.content).toEqual(content);
  });

  it('Nebius, pinned, in variant B', async () => {
    const body = { model: 'meta/llama-3.3-70b', messages, logprobs: true, top_logprobs: 2 };
    const { data } = await b.chat.completions.create(body, { headers: { 'X-Gateway-Provider': 'nebius' } }).withResponse();
    const content = data.choices[0]?.logprobs?.content as Logprob[];
    expectWellFormed(content, data.choices[0]?.message.content as string, 2);
    expect((await providerAnswer('nebius')).choices[0]?.logprobs.content).toEqual(content);
  });

  it('Azure answers them in OpenAI’s shape (with refusal), streamed or not, in variant B', async () => {
    const body = { model: 'openai/gpt-4o-mini', messages, logprobs: true, top_logprobs: 5 };
    await bothWays(b, body, 'azure', 5);
    const whole = await b.chat.completions.create(body);
    expect(whole.choices[0]?.logprobs?.refusal).toBeNull();
  });

  it('logprobs without top_logprobs: each token with no alternatives; none asked, none answered', async () => {
    await bothWays(a, { model: 'meta/llama-3.3-70b', messages, logprobs: true }, 'scaleway', 0);
    const plain = await a.chat.completions.create({ model: 'meta/llama-3.3-70b', messages });
    expect(plain.choices[0]?.logprobs ?? null).toBeNull();
  });
});

describe('top_logprobs without logprobs: true', () => {
  it('is refused before any provider is called, in each variant’s envelope, whatever the route would be', async () => {
    const calls = () => Object.values(gw.sim.providers).reduce((sum, p) => sum + (p?.stats().total ?? 0), 0);
    const before = calls();
    for (const [base, code] of [
      [gw.baseA, 'validation_error'],
      [gw.baseB, 'invalid_request'],
    ] as const) {
      for (const extra of [{ top_logprobs: 1 }, { top_logprobs: 3 }, { logprobs: false, top_logprobs: 3 }, { logprobs: null, top_logprobs: 2 }]) {
        // Scaleway and Mistral would take it as nothing, OVH's vLLM would answer 400: each is pinned in turn.
        for (const provider of ['scaleway', 'ovh']) {
          const res = await fetch(`${base}/chat/completions`, {
            method: 'POST',
            headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-gateway-provider': provider },
            body: JSON.stringify({ model: 'meta/llama-3.3-70b', messages, ...extra }),
          });
          const { error } = (await res.json()) as { error: { code: string; param: string; message: string } };
          expect([extra, provider, res.status, error.code, error.param]).toEqual([extra, provider, 400, code, 'top_logprobs']);
          expect(error.message).toBe("Invalid body: 'top_logprobs' is only allowed when 'logprobs' is true.");
        }
      }
    }
    expect(calls()).toBe(before);
    // The SDK maps it to its class; with logprobs: true the same count is answered.
    const refused = await b.chat.completions.create({ model: 'mistral/small', messages, top_logprobs: 1 }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(Error);
    expect((refused as { status?: number; param?: string }).status).toBe(400);
    expect((refused as { param?: string }).param).toBe('top_logprobs');
    const ok = await a.chat.completions.create({ model: 'meta/llama-3.3-70b', messages, logprobs: true, top_logprobs: 0 });
    expect(ok.choices[0]?.logprobs?.content?.length).toBeGreaterThan(0);
  });

  it('a count of 0 asks for nothing: answered on every route, never sent (vLLM refuses even 0 without logprobs: true)', async () => {
    for (const [base, client] of [
      ['A', a],
      ['B', b],
    ] as const) {
      for (const extra of [{ top_logprobs: 0 }, { logprobs: false, top_logprobs: 0 }]) {
        for (const provider of ['scaleway', 'ovh']) {
          const { data, response } = await client.chat.completions
            .create({ model: 'meta/llama-3.3-70b', messages, ...extra }, { headers: { 'x-gateway-provider': provider } })
            .withResponse();
          expect([base, extra, provider, response.status, response.headers.get('x-gateway-provider')]).toEqual([base, extra, provider, 200, provider]);
          expect(data.choices[0]?.logprobs ?? null).toBeNull();
          expect(gw.sim.providers[provider]?.stats().last?.body).not.toHaveProperty('top_logprobs');
        }
      }
    }
  });
});
