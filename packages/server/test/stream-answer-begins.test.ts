import type { GatewayFileConfig } from '@gw/schema';
import type { Fault } from '@gw/simulator';
import OpenAI from 'openai';
import type { ChatCompletionChunk } from 'openai/resources/chat/completions';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { eventually, resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';
import { upstreamOutcomes } from './helpers/metrics.js';
import { openAiClients } from './helpers/sdk.js';

// Providers open a stream with a chunk that carries only the role (`delta: {role: 'assistant', content: ''}`),
// Azure with its prompt filter results before it. A provider that fails or stalls after that and before its
// answer begins has given the client nothing: the next offer answers the whole stream, which alone is billed.

const TIMEOUT_MS = 600;
const pricing = { prompt_per_1m: 1000, completion_per_1m: 2000, currency: 'EUR' };
/** Mistral's own stream, then Scaleway's; Azure's (its filter chunk first), then Scaleway's. */
const MISTRAL_FIRST = 'duo/mistral-first';
const AZURE_FIRST = 'duo/azure-first';

function catalogue(c: GatewayFileConfig): GatewayFileConfig {
  return {
    providers: c.providers.map((p) => (p.id === 'mistral' || p.id === 'azure' ? { ...p, timeoutMs: TIMEOUT_MS } : p)),
    models: [
      ...c.models,
      {
        id: MISTRAL_FIRST,
        kind: 'chat',
        owned_by: 'test',
        capabilities: ['streaming'],
        offers: [
          { provider: 'mistral', upstreamModel: 'mistral-small-latest', pricing },
          { provider: 'scaleway', upstreamModel: 'mistral-small-3.2-24b-instruct-2506', pricing },
        ],
      },
      {
        id: AZURE_FIRST,
        kind: 'chat',
        owned_by: 'test',
        capabilities: ['streaming'],
        offers: [
          { provider: 'azure', upstreamModel: 'gpt-4o-mini', pricing },
          { provider: 'scaleway', upstreamModel: 'llama-3.3-70b-instruct', pricing },
        ],
      },
    ],
  };
}

let gw: TestGateway;

beforeAll(async () => {
  gw = await startGateway({ catalogue, env: { GW_CIRCUIT_FAILURES: '1000' } });
}, 60_000);
afterAll(() => gw?.close());
beforeEach(() => {
  resetProviders(gw.sim);
  for (const id of ['mistral', 'azure']) gw.sim.providers[id]?.configure({ chunkGapMs: 0 });
});

const messages = [{ role: 'user' as const, content: 'Tell me about streaming gateways in Europe' }];
const chats = (id: string) => gw.sim.providers[id]?.stats().byEndpoint.chat ?? 0;

async function recordsOf(requestId: string) {
  await gw.gateway.services.usage.flush();
  return gw.gateway.services.store.usage.list({ requestId });
}

/**
 * Streams `model` with the first offer's provider under `fault`, and checks that the client got one whole stream
 * from Scaleway (its role chunk first, no error), recorded once and billed once at Scaleway's count.
 */
async function failsOverWhole(model: string, first: 'mistral' | 'azure', fault: Fault) {
  const { id, key } = await gw.createKey({ rateLimitRpm: 1000 });
  const { a, b } = openAiClients(gw, key);
  const before = await upstreamOutcomes(gw.url, first);
  // A gap after each chunk, so that the opening chunks reach the gateway before the fault (a reset right behind them
  // could discard them unread, which is a failure before any chunk).
  gw.sim.providers[first]?.configure({ chunkGapMs: 40 });
  gw.sim.providers[first]?.setFault({ ...fault, times: 2 });
  let spentBefore = 0;
  for (const client of [a, b]) {
    const { data: stream, response } = await client.chat.completions
      .create({ model, messages, stream: true, stream_options: { include_usage: true } }, { headers: { 'X-Gateway-Provider-Prefer': first } })
      .withResponse();
    const chunks: ChatCompletionChunk[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(response.headers.get('x-gateway-provider')).toBe('scaleway');
    // The role chunk opens the stream, as OpenAI's does, and only the answering provider's.
    expect(chunks[0]?.choices[0]?.delta.role).toBe('assistant');
    expect(chunks.filter((c) => c.choices[0]?.delta.role !== undefined)).toHaveLength(1);
    const text = chunks.map((c) => c.choices[0]?.delta.content ?? '').join('');
    expect(text.length).toBeGreaterThan(20);
    expect(chunks.some((c) => c.choices[0]?.finish_reason === 'stop')).toBe(true);
    const usage = chunks.at(-1)?.usage;
    expect(usage?.completion_tokens).toBeGreaterThan(0);
    const records = await recordsOf(response.headers.get('x-request-id') as string);
    expect(records).toHaveLength(1);
    const cost = ((usage?.prompt_tokens ?? 0) * 1000 + (usage?.completion_tokens ?? 0) * 2000) / 1_000_000;
    expect(records[0]).toMatchObject({ provider: 'scaleway', status: 200, errorCode: null, streamed: true });
    expect(records[0]?.cost).toBeCloseTo(cost, 9);
    // The key is charged that stream once, nothing for the attempt that failed.
    await eventually(async () => {
      const { body } = await gw.admin<{ spent: number }>('GET', `/keys/${id}`);
      expect(body.spent).toBeCloseTo(spentBefore + cost, 9);
    });
    spentBefore += cost;
  }
  expect(gw.sim.providers[first]?.stats().faultsApplied).toBe(2);
  expect(chats('scaleway')).toBe(2);
  // The failed attempts count against the first provider's health, as any failure before the answer does.
  const after = await upstreamOutcomes(gw.url, first);
  const failed = Object.entries(after).reduce((n, [k, v]) => (k.startsWith('stream_') || k === 'ok' ? n : n + v - (before[k] ?? 0)), 0);
  expect(failed).toBe(2);
  expect((after['ok'] ?? 0) - (before['ok'] ?? 0)).toBe(0);
}

describe('a provider that sends its role chunk and then fails', () => {
  it('Mistral resets the connection after its role chunk: the next offer answers the whole stream', async () => {
    await failsOverWhole(MISTRAL_FIRST, 'mistral', { kind: 'reset', afterChunks: 1 });
  });

  it('Mistral sends its error object after its role chunk: the next offer answers the whole stream', async () => {
    await failsOverWhole(MISTRAL_FIRST, 'mistral', { kind: 'error_after_200', afterChunks: 1, status: 500 });
  });

  it('Mistral ends its stream cleanly after its role chunk, with no [DONE]: the next offer answers', async () => {
    await failsOverWhole(MISTRAL_FIRST, 'mistral', { kind: 'truncate', afterChunks: 1 });
  });

  it('Azure resets the connection after its prompt filter results and its role chunk: the next offer answers', async () => {
    await failsOverWhole(AZURE_FIRST, 'azure', { kind: 'reset', afterChunks: 2 });
  });

  it('with no other offer, the client gets the error of a failure before the stream, not a 200 that ends in an error event', async () => {
    const { key } = await gw.createKey();
    const { a } = openAiClients(gw, key);
    gw.sim.providers.mistral?.configure({ chunkGapMs: 40 });
    gw.sim.providers.mistral?.setFault({ kind: 'reset', afterChunks: 1 });
    const err = await a.chat.completions
      .create({ model: MISTRAL_FIRST, messages, stream: true }, { headers: { 'X-Gateway-Provider': 'mistral' } })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect([(err as InstanceType<typeof OpenAI.APIError>).status, (err as InstanceType<typeof OpenAI.APIError>).code]).toEqual([502, 'provider_down']);
    const [record] = await recordsOf((err as InstanceType<typeof OpenAI.APIError>).requestID as string);
    expect(record).toMatchObject({ status: 502, errorCode: 'upstream_failed', cost: 0 });
  });
});

describe('a provider that sends its role chunk and then stalls', () => {
  it('is bounded by its timeoutMs as one that sends nothing, and the next offer answers the whole stream', async () => {
    for (const fault of [
      { kind: 'hang', afterChunks: 1 },
      { kind: 'stall', afterChunks: 1, ms: TIMEOUT_MS * 5 },
    ] as const) {
      resetProviders(gw.sim);
      const started = Date.now();
      await failsOverWhole(MISTRAL_FIRST, 'mistral', fault);
      // Two streams, each waiting out the bound once.
      expect(Date.now() - started).toBeGreaterThanOrEqual(2 * TIMEOUT_MS - 100);
      expect(Date.now() - started).toBeLessThan(2 * (TIMEOUT_MS + 1000));
      await eventually(() => expect(gw.sim.providers.mistral?.stats().inFlight).toBe(0));
    }
  });
});

describe('a stream whose answer begins', () => {
  it('after its role chunk, in a read of its own: relayed whole, its role chunk first', async () => {
    const { key } = await gw.createKey();
    const { a } = openAiClients(gw, key);
    // A gap between the chunks, so that the role chunk is a read of its own.
    gw.sim.providers.mistral?.configure({ chunkGapMs: 30 });
    const { data: stream, response } = await a.chat.completions
      .create({ model: MISTRAL_FIRST, messages, stream: true }, { headers: { 'X-Gateway-Provider': 'mistral' } })
      .withResponse();
    const chunks: ChatCompletionChunk[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(response.headers.get('x-gateway-provider')).toBe('mistral');
    expect(chunks[0]?.choices[0]?.delta).toEqual({ role: 'assistant', content: '' });
    expect(chunks[1]?.choices[0]?.delta.content?.length).toBeGreaterThan(0);
    expect(chunks.some((c) => c.choices[0]?.finish_reason === 'stop')).toBe(true);
  });
});
