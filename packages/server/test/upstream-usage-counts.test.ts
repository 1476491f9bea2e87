import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { ModelConfig } from '@gw/schema';
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { flac, id3Tagged, m4a, m4aFragmented, mp3, mp3AfterGap, oggOpus, rf64, wav, webm, zeroPadded } from './helpers/audio.js';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';
import { startRawUpstream } from './helpers/raw-upstream.js';

/**
 * An OpenAI-compatible host (and a Mistral one at the same address) whose answers are right but whose usage counts
 * are not plain whole numbers: numeric strings, fractions, negatives, only a total; in a whole answer, in a stream's
 * usage chunk, in an embeddings list and as a transcription's seconds. What a client is told and what it is billed
 * must be the same whole, non-negative counts, and the request must be billed at all.
 */
const PRICE = { prompt_per_1m: 1000, completion_per_1m: 2000, currency: 'EUR' };
const UNIT_PRICE = { ...PRICE, per_unit: 0.001 };

const USAGES: Record<string, unknown> = {
  text: { prompt_tokens: '10', completion_tokens: '3', total_tokens: '13' },
  fraction: { prompt_tokens: 10.2, completion_tokens: 2.5, total_tokens: 12.7 },
  negative: { prompt_tokens: -5, completion_tokens: -100, total_tokens: -105 },
  'total-only': { total_tokens: 13 },
};

function host(req: IncomingMessage, res: ServerResponse, body: string) {
  const json = (value: unknown) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(value));
  if (req.method === 'GET') {
    const ids = [...Object.keys(USAGES), 'stream', 'embed', 'audio', 'audio-text', 'rerank'];
    // OpenAI's list and Cohere's (`models`, with names) in one answer.
    return json({ object: 'list', data: ids.map((id) => ({ id })), models: ids.map((name) => ({ name, endpoints: ['rerank'] })) });
  }
  if (req.url?.endsWith('/v2/rerank')) {
    const results = [
      { index: 1, relevance_score: 0.9 },
      { index: 0, relevance_score: 0.1 },
    ];
    return json({ id: 'r1', results, meta: { billed_units: { search_units: -50 } } });
  }
  if (req.url?.endsWith('/audio/transcriptions')) {
    // A host that answers `json` whatever was asked: the text, and nothing of the audio's length.
    if (body.includes('audio-text')) return json({ text: 'Good morning, and welcome to the meeting.' });
    const segments = [{ id: 0, start: 0, end: 3.4, text: ' Good morning.' }];
    return json({ task: 'transcribe', language: 'en', duration: -50, text: 'Good morning.', segments, usage: { type: 'duration', seconds: -100 } });
  }
  const request = JSON.parse(body) as { model: string; stream?: boolean; input?: string[] };
  if (req.url?.endsWith('/embeddings')) {
    const data = (request.input ?? []).map((_, index) => ({ object: 'embedding', index, embedding: [0.5, 0.25] }));
    return json({ object: 'list', model: request.model, data, usage: { prompt_tokens: 6.5, total_tokens: 6.5 } });
  }
  const message = { role: 'assistant', content: 'Good morning.' };
  if (!request.stream) {
    return json({
      id: 'c1',
      object: 'chat.completion',
      created: 1,
      model: request.model,
      choices: [{ index: 0, message, finish_reason: 'stop' }],
      usage: USAGES[request.model],
    });
  }
  const chunk = (choices: unknown[], usage?: unknown) =>
    `data: ${JSON.stringify({ id: 's1', object: 'chat.completion.chunk', created: 1, model: request.model, choices, ...(usage ? { usage } : {}) })}\n\n`;
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  res.end(
    chunk([{ index: 0, delta: { role: 'assistant', content: 'Good morning.' }, finish_reason: null }]) +
      chunk([{ index: 0, delta: {}, finish_reason: 'stop' }]) +
      chunk([], { prompt_tokens: '10', completion_tokens: 4.2, total_tokens: 'fourteen' }) +
      'data: [DONE]\n\n',
  );
}

function model(id: string, kind: ModelConfig['kind'], provider = 'host', upstream = id): ModelConfig {
  return {
    id: `counts/${id}`,
    kind,
    owned_by: 'test',
    context_window: 8000,
    ...(kind === 'chat' ? { capabilities: ['streaming'] } : {}),
    offers: [{ provider, upstreamModel: upstream, pricing: kind === 'audio' || kind === 'rerank' ? UNIT_PRICE : PRICE }],
  } as ModelConfig;
}

let upstream: Server;
let gw: TestGateway;

beforeAll(async () => {
  const started = await startRawUpstream(host);
  upstream = started.server;
  gw = await startGateway({
    catalogue: () => ({
      providers: [
        { id: 'host', type: 'openai', baseUrl: started.baseUrl, region: 'fr-par', apiKey: '' },
        { id: 'mhost', type: 'mistral', baseUrl: started.baseUrl, region: 'fr-par', apiKey: 'mistral-key' },
        { id: 'chost', type: 'cohere', baseUrl: new URL(started.baseUrl).origin, region: 'eu-west', apiKey: 'cohere-key' },
      ],
      models: [
        ...Object.keys(USAGES).map((id) => model(id, 'chat')),
        ...Object.keys(USAGES).map((id) => model(`mistral-${id}`, 'chat', 'mhost', id)),
        model('stream', 'chat'),
        model('mistral-stream', 'chat', 'mhost', 'stream'),
        model('embed', 'embedding'),
        model('audio', 'audio'),
        model('audio-text', 'audio'),
        model('rerank', 'rerank', 'chost'),
      ],
    }),
  });
});
afterAll(async () => {
  await gw?.close();
  await gw?.sim.close();
  upstream?.close();
});

type Usage = { prompt_tokens: number; completion_tokens: number; total_tokens: number };

/** Whole, non-negative counts whose total is their sum. */
function expectWhole(usage: Usage | null | undefined): asserts usage is Usage {
  expect(usage).toBeTruthy();
  const u = usage as Usage;
  for (const n of [u.prompt_tokens, u.completion_tokens]) {
    expect(Number.isInteger(n)).toBe(true);
    expect(n).toBeGreaterThanOrEqual(0);
  }
  expect(u.total_tokens).toBe(u.prompt_tokens + u.completion_tokens);
}

async function expectSpent(id: string, eur: number): Promise<void> {
  await eventually(async () => {
    expect((await gw.admin<{ spent: number }>('GET', `/keys/${id}`)).body.spent).toBeCloseTo(eur, 9);
  });
}

const cost = (u: Usage) => (u.prompt_tokens * 1000 + u.completion_tokens * 2000) / 1e6;

describe('usage counts that are not whole numbers', () => {
  for (const upstreamModel of Object.keys(USAGES)) {
    for (const prefix of ['', 'mistral-']) {
      it(`are told and billed as whole counts, the same ones (${prefix || 'openai-'}${upstreamModel})`, async () => {
        const { id, key } = await gw.createKey();
        const client = new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 0 });
        const answer = await client.chat.completions.create({ model: `counts/${prefix}${upstreamModel}`, messages: [{ role: 'user', content: 'hi' }] });
        expectWhole(answer.usage);
        if (upstreamModel === 'text') expect(answer.usage).toMatchObject({ prompt_tokens: 10, completion_tokens: 3 });
        if (upstreamModel === 'fraction') expect(answer.usage).toMatchObject({ prompt_tokens: 11, completion_tokens: 3 });
        // A negative or total-only count is none: the gateway's estimate, which is never nothing.
        expect(answer.usage.prompt_tokens).toBeGreaterThan(0);
        await expectSpent(id, cost(answer.usage));
      });
    }
  }

  it('in a stream’s usage chunk, reach the OpenAI SDK and the bill as whole counts (OpenAI-compatible and Mistral)', async () => {
    for (const name of ['counts/stream', 'counts/mistral-stream']) {
      const { id, key } = await gw.createKey();
      const client = new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 0 });
      const stream = await client.chat.completions.create({
        model: name,
        messages: [{ role: 'user', content: 'hi' }],
        stream: true,
        stream_options: { include_usage: true },
      });
      let usage: Usage | null = null;
      for await (const chunk of stream) usage = (chunk.usage as Usage | null) ?? usage;
      expectWhole(usage);
      expect(usage).toMatchObject({ prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 });
      await expectSpent(id, cost(usage));
    }
  });

  it('in an embeddings list, are billed rounded up', async () => {
    const { id, key } = await gw.createKey();
    const client = new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 0 });
    const answer = await client.embeddings.create({ model: 'counts/embed', input: ['a', 'b'], encoding_format: 'float' });
    expect(answer.usage).toMatchObject({ prompt_tokens: 7, total_tokens: 7 });
    await expectSpent(id, 0.007);
  });

  it('as a transcription’s negative seconds, are none: billed by the segments’ length', async () => {
    const { id, key } = await gw.createKey();
    const client = new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 0 });
    const answer = await client.audio.transcriptions.create({
      model: 'counts/audio',
      file: await toFile(wav(4), 'a.wav'),
      response_format: 'verbose_json',
    });
    expect(answer.duration).toBe(3.4);
    expect(answer.usage).toMatchObject({ type: 'duration', seconds: 4 });
    await expectSpent(id, 0.004);
  });

  it('as Cohere’s negative search units, are none: billed the documents’ own unit', async () => {
    const { id, key } = await gw.createKey();
    const res = await fetch(`${gw.baseA}/rerank`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'counts/rerank', query: 'q', documents: ['a', 'b'] }),
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { meta: { billed_units: { search_units: number } } };
    expect(body.meta.billed_units.search_units).toBe(1);
    await expectSpent(id, 0.001);
  });

  it('as a transcription with no length at all, are the upload’s, billed and told: a WAV’s data chunk, a compressed file’s container, else the text’s at 15 characters a second', async () => {
    // A WAV with 2 s worth of metadata after its audio (a LIST chunk, as some editors write last): 4 s, not 6.
    const list = Buffer.alloc(8 + 64_000);
    list.write('LIST', 0, 'ascii');
    list.writeUInt32LE(64_000, 4);
    // FLAC whose STREAMINFO leaves the sample count at 0 (a stream's encoder may): its container tells nothing.
    const untimed = flac(20);
    untimed[21] = (untimed[21] as number) & 0xf0;
    untimed.writeUInt32BE(0, 22);
    // The length billed is the one told: verbose_json's duration and its one segment's end, not 0.
    const cases: [string, Buffer, string, number, number?][] = [
      ['a.wav', Buffer.concat([wav(4), list]), 'verbose_json', 0.004, 4],
      // RF64: its `data` size is in its `ds64` chunk, its `data` chunk's 0xFFFFFFFF not the rest of the file.
      ['field', rf64(Buffer.concat([wav(4), list])), 'verbose_json', 0.004, 4],
      // 20 s as a provider decodes them, whatever their few words (the text alone said 3 s); MP3's frames make 20.01 s.
      ['a.mp3', mp3(20), 'json', 0.021],
      ['b.mp3', mp3AfterGap(20, 300), 'json', 0.021],
      ['padded.mp3', zeroPadded(mp3(20), 1000), 'json', 0.021],
      ['tagged', id3Tagged(flac(20)), 'json', 0.02],
      // 10 minutes of Opus at 0.5 kbit/s in 37 KB: its own length, not the 75 s its bytes hold at 4 kbit/s.
      ['quiet.ogg', oggOpus(600, 0.5), 'json', 0.6],
      ['voice.ogg', oggOpus(20), 'json', 0.02],
      ['memo.m4a', m4a(20), 'verbose_json', 0.02, 20],
      // Fragmented (Safari's MediaRecorder): its `mvhd` says 0, its fragments' samples 20 s.
      ['safari.m4a', m4aFragmented(20), 'json', 0.02],
      ['blob.webm', webm(20), 'json', 0.02],
      // 41 characters: 3 seconds.
      ['a.flac', untimed, 'json', 0.003],
    ];
    await Promise.all(
      cases.map(async ([name, file, format, spent, duration]) => {
        const { id, key } = await gw.createKey();
        const client = new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 0 });
        const answer = await client.audio.transcriptions.create({
          model: 'counts/audio-text',
          file: await toFile(file, name),
          response_format: format as 'json',
        });
        expect(answer.text, name).toBe('Good morning, and welcome to the meeting.');
        if (duration !== undefined) {
          const verbose = answer as unknown as { duration: number; segments: { end: number }[] };
          expect([verbose.duration, verbose.segments.at(-1)?.end], name).toEqual([duration, duration]);
        }
        await expectSpent(id, spent);
      }),
    );
  });
});
