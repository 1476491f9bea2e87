import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { gzipSync } from 'node:zlib';
import type { ModelConfig } from '@gw/schema';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';
import { answerModelList, startRawUpstream } from './helpers/raw-upstream.js';

/**
 * Embeddings answers are held against GW_BODY_MEMORY_MB as they arrive from the provider, as request bodies are: an
 * answer of known length that would pass the bound while other requests hold theirs waits, unread, for them to let
 * go (at most GW_SEND_TIMEOUT_MS here), then is served; one that waited in vain, or that passes the bound as it
 * arrives (no length told, or decoded larger), is answered 503 `out_of_resources` with `Retry-After: 1`, billed
 * nothing and not asked of another provider. An answer is always served while no other is held.
 */
const DIMS = 256;
/** 1.3 MB of floats: more than the 1 MiB bound alone. */
const LARGE = 240;
/** 0.75 MB: held while the others come, leaving room for their request bodies. */
const HELD = 140;
/** 0.43 MB: fits the bound alone, not beside the one held. */
const SMALL = 80;
const PRICE = { prompt_per_1m: 1_000, completion_per_1m: 0, currency: 'EUR' };

let release: () => void = () => {};
let answerSilent: () => void = () => {};
let calls = 0;

function list(model: string, inputs: number): Buffer {
  const data = Array.from({ length: inputs }, (_, index) => ({
    object: 'embedding',
    index,
    embedding: Array.from({ length: DIMS }, (_, j) => Math.sin(index * 31 + j) * 0.0123456789),
  }));
  return Buffer.from(JSON.stringify({ object: 'list', data, model, usage: { prompt_tokens: inputs, total_tokens: inputs } }));
}

function answer(req: IncomingMessage, res: ServerResponse, body: string) {
  if (req.method === 'GET') return answerModelList(res, NAMES);
  const { model, input } = JSON.parse(body) as { model: string; input: string[] };
  calls++;
  const bytes = list(model, input.length);
  if (model === 'silent') {
    // No head until the test says: its request holds its body only.
    answerSilent = () => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': bytes.length });
      res.end(bytes);
    };
    return;
  }
  if (model === 'gzip') {
    // Sent compressed though identity was asked for: its decoded bytes are what is held.
    const coded = gzipSync(bytes);
    res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'gzip', 'content-length': coded.length });
    return res.end(coded);
  }
  if (model === 'chunked') {
    // No Content-Length: held piece by piece as it arrives.
    res.writeHead(200, { 'content-type': 'application/json' });
    res.write(bytes.subarray(0, 1000));
    setTimeout(() => res.end(bytes.subarray(1000)), 50);
    return;
  }
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': bytes.length });
  if (model !== 'stalled') return res.end(bytes);
  // Its length is told (and held) at once; the rest waits for the test.
  res.write(bytes.subarray(0, 1000));
  release = () => res.end(bytes.subarray(1000));
}

function model(name: string): ModelConfig {
  return {
    id: `t/${name}`,
    kind: 'embedding',
    owned_by: 'test',
    context_window: 8192,
    beta: true,
    offers: [
      { provider: 'big', upstreamModel: name, pricing: PRICE },
      { provider: 'other', upstreamModel: name, pricing: PRICE },
    ],
  };
}

const NAMES = ['plain', 'stalled', 'chunked', 'gzip', 'silent'];

let upstream: Server;
let gw: TestGateway;
let key: string;
let keyId: string;

beforeAll(async () => {
  const started = await startRawUpstream(answer);
  upstream = started.server;
  const origin = new URL(started.baseUrl).origin;
  gw = await startGateway({
    env: { GW_BODY_MEMORY_MB: '1', GW_SEND_TIMEOUT_MS: '1000' },
    catalogue: () => ({
      providers: [
        { id: 'big', type: 'openai', baseUrl: `${origin}/v1`, region: 'fr-par', apiKey: '' },
        { id: 'other', type: 'openai', baseUrl: `${origin}/other/v1`, region: 'fr-par', apiKey: '' },
      ],
      models: NAMES.map(model),
    }),
  });
  ({ key, id: keyId } = await gw.createKey({ rateLimitRpm: 1000 }));
});
afterAll(async () => {
  await gw?.close();
  await gw?.sim.close();
  upstream?.close();
});

function embed(base: string, name: string, inputs: number, textBytes = 8) {
  return fetch(`${base}/embeddings`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: `t/${name}`, input: Array.from({ length: inputs }, (_, i) => `text ${i}`.padEnd(textBytes, '.')) }),
  });
}

async function heldAtLeast(bytes: number): Promise<void> {
  for (let i = 0; i < 100 && gw.gateway.services.bodyMemory.held < bytes; i++) await new Promise((r) => setTimeout(r, 20));
  expect(gw.gateway.services.bodyMemory.held).toBeGreaterThanOrEqual(bytes);
}

async function spent(): Promise<number> {
  await gw.gateway.services.usage.flush();
  return (await gw.admin<{ spent: number }>('GET', `/keys/${keyId}`)).body.spent;
}

describe('embeddings answers under GW_BODY_MEMORY_MB', () => {
  it('serves an answer larger than the bound while no other answer is held, whatever bodies other requests hold', async () => {
    expect((await embed(gw.baseA, 'plain', LARGE)).status).toBe(200);
    // A request waiting on its provider holds its 0.4 MB body only: the answer larger than the bound still goes on.
    const waiting = embed(gw.baseA, 'silent', 50, 8_000);
    await heldAtLeast(400_000);
    const res = await embed(gw.baseA, 'plain', LARGE);
    expect(res.status).toBe(200);
    expect(((await res.json()) as { data: unknown[] }).data).toHaveLength(LARGE);
    answerSilent();
    expect((await waiting).status).toBe(200);
    expect(gw.gateway.services.bodyMemory).toMatchObject({ held: 0, answers: 0 });
  });

  it('reads an answer that does not fit beside one held once that one is let go, in each variant, or answers 503 out_of_resources after the wait, and bills only what it served', async () => {
    const before = await spent();
    const callsBefore = calls;
    const held = embed(gw.baseA, 'stalled', HELD);
    // Its Content-Length is held once its head has come.
    await heldAtLeast(700_000);
    // One that waits in vain (the held one stays for longer than the instance's wait, a second here).
    const started = performance.now();
    const late = await embed(gw.baseA, 'plain', SMALL);
    expect(late.status).toBe(503);
    expect(performance.now() - started).toBeGreaterThanOrEqual(900);
    // Those whose answer passes the bound as it arrives (no length told, or decoded larger) are refused at once.
    const refusals: [Response, string][] = [[late, 'service_unavailable']];
    for (const name of ['chunked', 'gzip']) refusals.push([await embed(gw.baseA, name, SMALL), 'service_unavailable']);
    for (const [res, type] of refusals) {
      expect(res.status).toBe(503);
      expect(res.headers.get('retry-after')).toBe('1');
      const { error } = (await res.json()) as { error: { code: string; type: string; message: string } };
      expect(error).toMatchObject({ code: 'service_unavailable', type });
      expect(error.message).toContain('GW_BODY_MEMORY_MB');
      expect(error.message).toContain("the provider's answer was not read");
    }
    // Two that wait, in each variant, and are served once the held one has gone to its client.
    let ended = 0;
    const waiting = [embed(gw.baseA, 'plain', SMALL), embed(gw.baseB, 'plain', SMALL)].map((p) => p.finally(() => ended++));
    await new Promise((r) => setTimeout(r, 300));
    expect(ended).toBe(0);
    release();
    const res = await held;
    expect(res.status).toBe(200);
    expect(((await res.json()) as { data: unknown[] }).data).toHaveLength(HELD);
    for (const answer of await Promise.all(waiting)) {
      expect(answer.status).toBe(200);
      // The whole answer: 80 vectors of 256 floats, in either variant's shape.
      expect((await answer.text()).length).toBeGreaterThan(SMALL * DIMS * 5);
    }
    // Each was asked of one provider, not of the second offer too, and only those served are billed.
    expect(calls - callsBefore).toBe(6);
    expect(await spent()).toBeCloseTo(before + ((HELD + 2 * SMALL) * PRICE.prompt_per_1m) / 1e6, 9);
    // Each let go as its request closed.
    expect(gw.gateway.services.bodyMemory).toMatchObject({ held: 0, answers: 0 });
  });
});
