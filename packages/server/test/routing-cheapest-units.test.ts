import { type Simulator, startSimulator } from '@gw/simulator';
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { wav } from './helpers/audio.js';
import { resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';

// Each served by two providers, the dearer one first in the configured order.
const AUDIO = 'test/voxtral-two';
const RERANK = 'test/rerank-two';
const perUnit = (per_unit: number) => ({ prompt_per_1m: 0, completion_per_1m: 0, currency: 'EUR' as const, per_unit });

let sim: Simulator;
let gw: TestGateway;
let key: string;

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  gw = await startGateway({
    sim,
    catalogue: (c) => ({
      ...c,
      models: [
        ...c.models,
        {
          id: AUDIO,
          kind: 'audio',
          owned_by: 'test',
          offers: [
            { provider: 'mistral', upstreamModel: 'voxtral-mini-latest', pricing: perUnit(0.0009) },
            { provider: 'scaleway', upstreamModel: 'voxtral-mini-3b-2507', pricing: perUnit(0.00005) },
          ],
        },
        {
          id: RERANK,
          kind: 'rerank',
          owned_by: 'test',
          offers: [
            { provider: 'cohere', upstreamModel: 'rerank-v3.5', pricing: perUnit(0.004) },
            { provider: 'scaleway', upstreamModel: 'bge-multilingual-gemma2', pricing: perUnit(0.001) },
          ],
        },
      ],
    }),
  });
  key = (await gw.createKey({ rateLimitRpm: 10_000 })).key;
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await sim?.close();
});
beforeEach(() => resetProviders(sim));

async function transcribe(base: string, strategy: string) {
  const client = new OpenAI({ apiKey: key, baseURL: base, maxRetries: 0 });
  const { response } = await client.audio.transcriptions
    .create({ file: await toFile(wav(2), 'note.wav', { type: 'audio/wav' }), model: AUDIO }, { headers: { 'X-Gateway-Strategy': strategy } })
    .withResponse();
  return response.headers.get('x-gateway-provider');
}

async function rerank(base: string, strategy: string) {
  const res = await fetch(`${base}/rerank`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-gateway-strategy': strategy },
    body: JSON.stringify({ model: RERANK, query: 'capital of France', documents: ['Paris is the capital of France.', 'Berlin is in Germany.'] }),
  });
  expect(res.status).toBe(200);
  return res.headers.get('x-gateway-provider');
}

describe('cheapest for models billed per audio second or search unit', () => {
  it.each([
    ['A', () => gw.baseA],
    ['B', () => gw.baseB],
  ])('variant %s: a transcription goes to the offer with the lowest price per second', async (_v, base) => {
    expect(await transcribe(base(), 'default')).toBe('mistral');
    expect(await transcribe(base(), 'cheapest')).toBe('scaleway');
  });

  it.each([
    ['A', () => gw.baseA],
    ['B', () => gw.baseB],
  ])('variant %s: a rerank goes to the offer with the lowest price per search unit', async (_v, base) => {
    expect(await rerank(base(), 'default')).toBe('cohere');
    expect(await rerank(base(), 'cheapest')).toBe('scaleway');
  });
});
