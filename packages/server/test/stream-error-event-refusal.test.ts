import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';
import { openAiClients } from './helpers/sdk.js';

// vLLM hosts (Scaleway, OVHcloud, Nebius) answer a stream request with 200 and may then refuse the request inside
// the stream, as an error object naming its status (`code: 400`, a prompt over the context window). That is the
// client's error, as the same refusal with a 400 status is: one provider asked, a 400 with its message, nothing
// counted against the provider's health. A provider's own failure in the stream (a 500 object) still fails over.

let gw: TestGateway;

beforeAll(async () => {
  // One failure opens a circuit: a refusal counted against the providers would take the model out of every plan.
  gw = await startGateway({ env: { GW_CIRCUIT_FAILURES: '1' } });
}, 60_000);
afterAll(() => gw?.close());
beforeEach(() => resetProviders(gw.sim));

const MODEL = 'mistral/small';
const HOSTS = ['scaleway', 'ovh', 'mistral'] as const;
const TOO_LONG = "This model's maximum context length is 128000 tokens. However, your messages resulted in 130412 tokens.";
const messages = [{ role: 'user' as const, content: 'A prompt this host finds too long' }];
const chats = (id: string) => gw.sim.providers[id]?.stats().byEndpoint.chat ?? 0;

async function rowsOf(requestId: string) {
  await gw.gateway.services.usage.flush();
  return gw.gateway.services.store.usage.list({ requestId });
}

describe('a refusal sent inside a 200 stream before the answer began', () => {
  it('is the client 400 in both variants, asks one provider, records one row at no cost, and opens no circuit', async () => {
    const { key } = await gw.createKey({ rateLimitRpm: 1000 });
    const { a, b } = openAiClients(gw, key);
    for (const id of HOSTS) gw.sim.providers[id]?.setFault({ kind: 'error_after_200', afterChunks: 1, status: 400, message: TOO_LONG });
    for (const [client, code] of [
      [a, 'validation_error'],
      [b, 'invalid_request'],
      [a, 'validation_error'],
    ] as const) {
      const err = await client.chat.completions
        .create({ model: MODEL, messages, stream: true })
        .then(async (stream) => {
          for await (const _ of stream);
          return null;
        })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(OpenAI.BadRequestError);
      const e = err as InstanceType<typeof OpenAI.BadRequestError>;
      expect(e.status).toBe(400);
      expect(e.code).toBe(code);
      expect(e.message).toContain(TOO_LONG);
      const rows = await rowsOf(e.headers?.get('x-request-id') as string);
      expect(rows).toHaveLength(1);
      expect(rows[0]).toMatchObject({ status: 400, errorCode: 'validation', cost: 0 });
    }
    // Every request reached the first host and no other: no failover, and no circuit opened by the client's error.
    expect(HOSTS.map(chats)).toEqual([3, 0, 0]);
  });

  it("Mistral's refusal object (no numeric code) is the client's too", async () => {
    const { key } = await gw.createKey({ rateLimitRpm: 1000 });
    const { a } = openAiClients(gw, key);
    gw.sim.providers.mistral?.setFault({ kind: 'error_after_200', afterChunks: 1, status: 400, message: 'Prompt contains 140000 tokens, too large' });
    const err = await a.chat.completions
      .create({ model: MODEL, messages, stream: true }, { headers: { 'X-Gateway-Provider': 'mistral' } })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect(chats('mistral')).toBe(1);
  });

  it("a provider's own failure in the stream still fails over", async () => {
    const { key } = await gw.createKey({ rateLimitRpm: 1000 });
    const { a } = openAiClients(gw, key);
    gw.sim.providers.scaleway?.setFault({ kind: 'error_after_200', afterChunks: 1, status: 500, times: 1 });
    const stream = await a.chat.completions.create({ model: 'meta/llama-3.3-70b', messages, stream: true });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
    expect(text).toContain('ovh');
  });
});
