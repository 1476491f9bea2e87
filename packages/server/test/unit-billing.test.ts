import { type Simulator, startSimulator } from '@gw/simulator';
import { CohereClientV2, type CohereError } from 'cohere-ai';
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { wav } from './helpers/audio.js';
import { resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';

// Rerank and audio models priced as INTERFACES.md prices every offer (tokens, no per_unit), beside the demo's per-unit ones.
const tokens = (prompt: number, completion: number) => ({ prompt_per_1m: prompt, completion_per_1m: completion, currency: 'EUR' as const });
const COHERE_TOKENS = 'test/rerank-cohere-tokens';
const SCALEWAY_TOKENS = 'test/rerank-scaleway-tokens';
const WHISPER_TOKENS = 'test/whisper-tokens';
const VOXTRAL_TOKENS = 'test/voxtral-tokens';
// The demo catalogue's per-unit offers: cohere/rerank-v3.5 at 0.0019 a search unit, whisper at 0.00005 an audio second.
const COHERE_PER_UNIT = 'cohere/rerank-v3.5';
const WHISPER_PER_UNIT = 'openai/whisper-large-v3';

let sim: Simulator;
let gw: TestGateway;

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  gw = await startGateway({
    sim,
    catalogue: (c) => ({
      ...c,
      models: [
        ...c.models,
        { id: COHERE_TOKENS, kind: 'rerank', owned_by: 'test', offers: [{ provider: 'cohere', upstreamModel: 'rerank-v3.5', pricing: tokens(2, 0) }] },
        {
          id: SCALEWAY_TOKENS,
          kind: 'rerank',
          owned_by: 'test',
          offers: [{ provider: 'scaleway', upstreamModel: 'bge-multilingual-gemma2', pricing: tokens(2, 0) }],
        },
        { id: WHISPER_TOKENS, kind: 'audio', owned_by: 'test', offers: [{ provider: 'scaleway', upstreamModel: 'whisper-large-v3', pricing: tokens(3, 10) }] },
        {
          id: VOXTRAL_TOKENS,
          kind: 'audio',
          owned_by: 'test',
          offers: [{ provider: 'mistral', upstreamModel: 'voxtral-mini-latest', pricing: tokens(3, 10) }],
        },
      ],
    }),
  });
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await sim?.close();
});
beforeEach(() => resetProviders(sim));

const query = 'What is the capital of France?';
const documents = ['Berlin is the capital of Germany.', 'Paris is the capital and largest city of France.', 'The Loire is the longest river in France.'];
const per3 = (s: string) => Math.ceil(s.length / 3);
/** The gateway's count without the provider's: the query with each document, 3 characters a token. */
const estimated = per3(query) * documents.length + documents.reduce((n, d) => n + per3(d), 0);
/** What the simulated Scaleway reports in `usage.total_tokens` (4 characters a token, the query with each document). */
const per4 = (s: string) => Math.ceil(s.length / 4);
const scalewayCount = per4(query) * documents.length + documents.reduce((n, d) => n + per4(d), 0);

/** A 3.5 s WAV: the providers bill 4 seconds; the hold counts 4 seconds too (its size at the header's byte rate). */
const audio = () => toFile(wav(3.5), 'meeting.wav', { type: 'audio/wav' });
const TRANSCRIPT = 'Simulated transcript of 3.5 seconds of audio.';

async function recordAndSpent(keyId: string) {
  await gw.gateway.services.usage.flush();
  const [record] = await gw.gateway.services.store.usage.list({ keyId });
  const { spent } = (await gw.admin<{ spent: number }>('GET', `/keys/${keyId}`)).body;
  return { record, spent };
}

function cohere(key: string) {
  return new CohereClientV2({ token: key, environment: gw.url, maxRetries: 0 });
}

function openai(key: string) {
  return new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 0 });
}

describe('a rerank offer priced per token (no per_unit), through Cohere’s SDK', () => {
  it('is billed the gateway’s estimate of the query with each document at prompt_per_1m when the provider counts no tokens (Cohere)', async () => {
    const { id, key } = await gw.createKey({ budget: 1 });
    const answer = await cohere(key).rerank({ model: COHERE_TOKENS, query, documents });
    const { record, spent } = await recordAndSpent(id);
    expect(record?.cost).toBeCloseTo((estimated * 2) / 1e6, 12);
    expect(spent).toBeCloseTo((estimated * 2) / 1e6, 12);
    expect(record).toMatchObject({ kind: 'rerank', provider: 'cohere', promptTokens: estimated, units: 1, status: 200 });
    expect(answer.results[0]?.index).toBe(1);
    // The answer says what was billed, in Cohere's own key for it.
    expect(answer.meta?.billedUnits).toEqual({ searchUnits: 1, inputTokens: estimated });
  });

  it('is billed the tokens the provider reports when it reports them (Scaleway’s usage.total_tokens)', async () => {
    const { id, key } = await gw.createKey({ budget: 1 });
    const answer = await cohere(key).rerank({ model: SCALEWAY_TOKENS, query, documents });
    const { record, spent } = await recordAndSpent(id);
    expect(scalewayCount).not.toBe(estimated);
    expect(record?.cost).toBeCloseTo((scalewayCount * 2) / 1e6, 12);
    expect(spent).toBeCloseTo((scalewayCount * 2) / 1e6, 12);
    expect(record).toMatchObject({ provider: 'scaleway', promptTokens: scalewayCount });
    expect(answer.meta?.billedUnits?.inputTokens).toBe(scalewayCount);
  });

  it('is refused with 402 before the provider is called when the budget cannot hold its worst case', async () => {
    const { id, key } = await gw.createKey({ budget: (estimated * 2) / 1e6 - 1e-9 });
    const err = (await cohere(key)
      .rerank({ model: COHERE_TOKENS, query, documents })
      .catch((e: unknown) => e)) as CohereError;
    expect(err.statusCode).toBe(402);
    expect(sim.providers.cohere?.stats().total).toBe(0);
    const { spent } = await recordAndSpent(id);
    expect(spent).toBe(0);
  });

  it('an offer with per_unit is billed per search unit as before, its tokens not', async () => {
    const { id, key } = await gw.createKey({ budget: 1 });
    const answer = await cohere(key).rerank({ model: COHERE_PER_UNIT, query, documents });
    expect(answer.meta?.billedUnits).toEqual({ searchUnits: 1 });
    const { record, spent } = await recordAndSpent(id);
    expect(record).toMatchObject({ provider: 'cohere', promptTokens: 0, units: 1 });
    expect(record?.cost).toBeCloseTo(0.0019, 12);
    expect(spent).toBeCloseTo(0.0019, 12);
  });
});

describe('an audio offer priced per token (no per_unit), through the openai SDK', () => {
  it('is billed the audio seconds at 12.5 tokens a second and the transcript at 3 characters a token when the provider gives seconds only (Whisper)', async () => {
    const { id, key } = await gw.createKey({ budget: 1 });
    const data = await openai(key).audio.transcriptions.create({ file: await audio(), model: WHISPER_TOKENS, response_format: 'verbose_json' });
    expect(data.text).toBe(TRANSCRIPT);
    const input = Math.ceil(4 * 12.5);
    const output = per3(TRANSCRIPT);
    const { record, spent } = await recordAndSpent(id);
    const cost = (input * 3 + output * 10) / 1e6;
    expect(record?.cost).toBeCloseTo(cost, 12);
    expect(spent).toBeCloseTo(cost, 12);
    expect(record).toMatchObject({ kind: 'audio', provider: 'scaleway', promptTokens: input, completionTokens: output, units: 4, status: 200 });
    // The answer's usage is what is billed: tokens, in OpenAI's shape for token-billed models.
    expect(data.usage).toEqual({ type: 'tokens', input_tokens: input, output_tokens: output, total_tokens: input + output });
  });

  it('is billed the tokens the provider counts when it counts them (Voxtral’s usage)', async () => {
    const { id, key } = await gw.createKey({ budget: 1 });
    const data = await openai(key).audio.transcriptions.create({ file: await audio(), model: VOXTRAL_TOKENS });
    // The simulated Voxtral: 12.5 audio tokens a second of the 3.5, one transcript token a word.
    const input = Math.ceil(3.5 * 12.5);
    const output = TRANSCRIPT.split(' ').length;
    const { record, spent } = await recordAndSpent(id);
    expect(record?.cost).toBeCloseTo((input * 3 + output * 10) / 1e6, 12);
    expect(spent).toBeCloseTo((input * 3 + output * 10) / 1e6, 12);
    expect(record).toMatchObject({ provider: 'mistral', promptTokens: input, completionTokens: output });
    expect(data.usage).toEqual({ type: 'tokens', input_tokens: input, output_tokens: output, total_tokens: input + output });
  });

  it('is refused with 402 before the provider is called when the budget cannot hold its worst case (15 transcript tokens a second), though the bill would fit', async () => {
    const worst = (Math.ceil(4 * 12.5) * 3 + 4 * 15 * 10) / 1e6;
    const likely = (Math.ceil(4 * 12.5) * 3 + per3(TRANSCRIPT) * 10) / 1e6;
    const { key } = await gw.createKey({ budget: (worst + likely) / 2 });
    const res = await openai(key)
      .audio.transcriptions.create({ file: await audio(), model: WHISPER_TOKENS })
      .catch((e: unknown) => e);
    expect(res).toBeInstanceOf(OpenAI.APIError);
    expect((res as InstanceType<typeof OpenAI.APIError>).status).toBe(402);
    expect(sim.providers.scaleway?.stats().total).toBe(0);
    // The same budget a little above the worst case lets it through.
    const room = await gw.createKey({ budget: worst + 1e-9 });
    const data = await openai(room.key).audio.transcriptions.create({ file: await audio(), model: WHISPER_TOKENS });
    expect(data.text).toBe(TRANSCRIPT);
  });

  it('an offer with per_unit is billed per audio second as before, and its answer’s usage is seconds', async () => {
    const { id, key } = await gw.createKey({ budget: 1 });
    const data = await openai(key).audio.transcriptions.create({ file: await audio(), model: WHISPER_PER_UNIT, response_format: 'verbose_json' });
    expect(data.usage).toEqual({ type: 'duration', seconds: 4 });
    const { record, spent } = await recordAndSpent(id);
    expect(record).toMatchObject({ provider: 'scaleway', promptTokens: 0, completionTokens: 0, units: 4 });
    expect(record?.cost).toBeCloseTo(4 * 0.00005, 12);
    expect(spent).toBeCloseTo(4 * 0.00005, 12);
  });
});

describe('variant B’s model list', () => {
  it('shows a per-token rerank or audio model’s token prices, without per_unit; a per-unit one its per_unit and unit', async () => {
    const { key } = await gw.createKey();
    const list = (await (await fetch(`${gw.baseB}/models`, { headers: { authorization: `Bearer ${key}` } })).json()) as {
      data: { id: string; pricing: Record<string, unknown> }[];
    };
    const pricing = (id: string) => list.data.find((m) => m.id === id)?.pricing;
    expect(pricing(COHERE_TOKENS)).toEqual({ prompt_per_1m: 2, completion_per_1m: 0, currency: 'EUR' });
    expect(pricing(WHISPER_TOKENS)).toEqual({ prompt_per_1m: 3, completion_per_1m: 10, currency: 'EUR' });
    expect(pricing(COHERE_PER_UNIT)).toMatchObject({ per_unit: 0.0019, unit: 'search_unit' });
  });
});
