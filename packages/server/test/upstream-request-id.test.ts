import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { wav } from './helpers/audio.js';
import { resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';

// The gateway's X-Request-Id reaches every provider it calls, so that an operator can quote it to the provider's
// support: the simulator records the headers of the last request each provider received.

let gw: TestGateway;
let key: string;

beforeAll(async () => {
  gw = await startGateway();
  key = (await gw.createKey({ rateLimitRpm: 10_000 })).key;
}, 60_000);
afterAll(() => gw?.close());
beforeEach(() => resetProviders(gw.sim));

async function post(path: string, body: unknown, provider?: string): Promise<string> {
  const res = await fetch(`${gw.baseA}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...(provider ? { 'x-gateway-provider': provider } : {}) },
    body: JSON.stringify(body),
  });
  await res.arrayBuffer();
  expect(res.status).toBe(200);
  return res.headers.get('x-request-id') as string;
}

/** The headers of the last request `provider` received. */
function received(provider: string): Record<string, string> {
  const last = gw.sim.providers[provider]?.stats().last;
  if (!last) throw new Error(`${provider} received nothing`);
  return last.headers;
}

const messages = [{ role: 'user', content: 'Bonjour' }];

describe("the gateway's request id, sent upstream", () => {
  it('Mistral: chat, stream, embeddings and transcriptions carry x-request-id', async () => {
    let id = await post('/chat/completions', { model: 'mistral/medium', messages });
    expect(received('mistral')['x-request-id']).toBe(id);
    id = await post('/chat/completions', { model: 'mistral/medium', messages, stream: true });
    expect(received('mistral')['x-request-id']).toBe(id);
    id = await post('/embeddings', { model: 'mistral/embed', input: ['un texte'] });
    expect(received('mistral')['x-request-id']).toBe(id);
    const form = new FormData();
    form.set('model', 'mistral/voxtral-mini');
    form.set('file', new Blob([wav(1)], { type: 'audio/wav' }), 'tone.wav');
    const res = await fetch(`${gw.baseA}/audio/transcriptions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'x-gateway-provider': 'mistral' },
      body: form,
    });
    await res.arrayBuffer();
    expect(res.status).toBe(200);
    expect(received('mistral')['x-request-id']).toBe(res.headers.get('x-request-id'));
  });

  it('Cohere: rerank and embed carry x-request-id', async () => {
    let id = await post('/rerank', { model: 'cohere/rerank-v3.5', query: 'capital', documents: ['Paris', 'Lyon'] });
    expect(received('cohere')['x-request-id']).toBe(id);
    id = await post('/embeddings', { model: 'cohere/embed-multilingual-v3', input: ['un texte'] });
    expect(received('cohere')['x-request-id']).toBe(id);
  });

  it('OpenAI-compatible hosts carry x-request-id, Azure x-ms-client-request-id', async () => {
    for (const provider of ['scaleway', 'ovh']) {
      const id = await post('/chat/completions', { model: 'mistral/small', messages }, provider);
      expect(received(provider)['x-request-id']).toBe(id);
    }
    const id = await post('/chat/completions', { model: 'openai/gpt-4o-mini', messages });
    expect(received('azure')['x-ms-client-request-id']).toBe(id);
  });
});
