import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Simulator, startSimulator } from '@gw/simulator';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { vendorOfHost } from '../src/config/vendor.js';
import { chunkJson } from '../src/providers/chunk-json.js';
import { parseVerboseTranscription, transcriptionFields } from '../src/providers/openai-compatible/audio.js';
import { parseChatCompletion, toUpstreamChatBody, toUpstreamStreamBody } from '../src/providers/openai-compatible/chat.js';
import { parseEmbeddingsList, toUpstreamEmbeddingsBody } from '../src/providers/openai-compatible/embeddings.js';
import { httpError } from '../src/providers/openai-compatible/errors.js';
import { OpenAICompatibleAdapter, sentCompletionCap } from '../src/providers/openai-compatible/index.js';
import { parseModelList } from '../src/providers/openai-compatible/models.js';
import { parseRerank, searchUnitsOf } from '../src/providers/openai-compatible/rerank.js';
import { openAiDecoder } from '../src/providers/openai-compatible/stream.js';
import type { ChatChunk, SpooledUpload } from '../src/providers/types.js';
import { answer, call, collect, providerConfig, scannedList, upstreamError } from './helpers/adapters.js';
import { wav } from './helpers/audio.js';

const file: SpooledUpload = { path: '/nowhere', size: 1, filename: 'a.wav', contentType: 'audio/wav' };

describe('OpenAI-compatible adapter fixtures: embeddings, rerank, transcription', () => {
  it('asks for floats, passes dimensions, and puts vectors back in input order', () => {
    expect(toUpstreamEmbeddingsBody({ input: ['a', 'b'], dimensions: 64, inputType: 'search_query' }, 'bge-m3')).toEqual({
      model: 'bge-m3',
      input: ['a', 'b'],
      encoding_format: 'float',
      dimensions: 64,
    });
    const parsed = parseEmbeddingsList(
      'ovh',
      answer(200, {
        object: 'list',
        data: [
          { object: 'embedding', index: 1, embedding: [0, 1] },
          { object: 'embedding', index: 0, embedding: [1, 0] },
        ],
        usage: { prompt_tokens: 5, total_tokens: 5 },
      }),
      2,
    );
    expect(parsed).toEqual({
      vectors: [
        [1, 0],
        [0, 1],
      ],
      promptTokens: 5,
    });
    expect(() => parseEmbeddingsList('ovh', answer(200, { data: [{ index: 0, embedding: [1] }] }), 2)).toThrow(/1 embeddings for 2 inputs/);
    const statusOf = (status: number, body: unknown) => {
      try {
        parseEmbeddingsList('scaleway', answer(status, body), 1);
      } catch (e) {
        return (e as { status: number }).status;
      }
    };
    // Scaleway's unknown model is the provider's gap (404, worth the next offer); other 422s are the request's.
    expect(statusOf(422, { error: { message: 'Model not found', code: 422 } })).toBe(404);
    expect(statusOf(422, { error: { message: 'input: Field required', type: 'invalid_request_error', code: 422 } })).toBe(422);
    // A status routing does not know is the provider failing: 502.
    expect(statusOf(402, { error: { message: 'Payment required', code: 402 } })).toBe(502);
  });

  it('takes a model list with entries but no model ids for a broken answer (the last good list is kept), and an empty one for empty', () => {
    expect(() => parseModelList('tiny', scannedList(200, { object: 'list', data: [{ name: 'tiny-1' }, null, 5] }))).toThrow(/entries but no model ids/);
    expect(parseModelList('tiny', scannedList(200, { object: 'list', data: [] }))).toEqual([]);
    expect(parseModelList('tiny', scannedList(200, { data: [{ id: 'a' }, { name: 'b' }] }))).toEqual(['a']);
  });

  it('reads Jina-style rerank answers (document echoed, token usage) as index and score, with Cohere search units and the tokens used', () => {
    const parsed = parseRerank(
      'scaleway',
      answer(200, {
        id: 'rerank-1',
        model: 'm',
        usage: { total_tokens: 42 },
        results: [{ index: 1, document: { text: 'b', multi_modal: null }, relevance_score: 0.7 }],
      }),
      2,
    );
    expect(parsed).toEqual({ id: 'rerank-1', results: [{ index: 1, relevanceScore: 0.7 }], searchUnits: 1, inputTokens: 42 });
    // No usage (or a count of 0): no count, and an offer priced per token is billed the gateway's estimate.
    for (const usage of [undefined, { total_tokens: 0 }]) {
      expect(parseRerank('scaleway', answer(200, { results: [{ index: 0, relevance_score: 0.1 }], usage }), 1).inputTokens).toBeNull();
    }
    expect([searchUnitsOf(1), searchUnitsOf(100), searchUnitsOf(101), searchUnitsOf(250)]).toEqual([1, 1, 2, 3]);
  });

  it('always asks for verbose_json (segment timings by default) and reads OVH’s variant: extra keys dropped, ids renumbered by the gateway', () => {
    expect(transcriptionFields({ file, granularities: [], needSegments: false, language: 'de' }, 'whisper-large-v3')).toEqual([
      ['model', 'whisper-large-v3'],
      ['response_format', 'verbose_json'],
      ['language', 'de'],
      ['timestamp_granularities[]', 'segment'],
    ]);
    const t = parseVerboseTranscription(
      'ovh',
      answer(200, {
        task: 'transcribe',
        language: 'en',
        duration: 5.2,
        text: 'Hello there.',
        segments: [
          {
            id: 1,
            seek: 0,
            start: 0,
            end: 5.2,
            text: ' Hello there.',
            tokens: [1, 2],
            temperature: 0,
            avg_logprob: -0.3,
            compression_ratio: 1,
            no_speech_prob: 0.02,
          },
        ],
        success: true,
        diarization: [{ speaker: 0, text: 'Hello there.', start: 0, end: 5.2 }],
        usage: { type: 'duration', seconds: 6 },
      }),
    );
    expect(t).toEqual({
      text: 'Hello there.',
      language: 'en',
      duration: 5.2,
      segments: [
        {
          start: 0,
          end: 5.2,
          text: ' Hello there.',
          extra: { seek: 0, tokens: [1, 2], temperature: 0, avg_logprob: -0.3, compression_ratio: 1, no_speech_prob: 0.02 },
        },
      ],
      words: null,
      billedSeconds: 6,
      tokens: null,
    });
    const tokenBilled = parseVerboseTranscription(
      'x',
      answer(200, { text: 'a', duration: 2.1, usage: { type: 'tokens', input_tokens: 30, output_tokens: 2, total_tokens: 32 } }),
    );
    expect(tokenBilled.billedSeconds).toBe(3);
    expect(tokenBilled.tokens).toEqual({ input: 30, output: 2 });
  });
});

describe('OpenAI-compatible chat answers in OpenAI’s shape', () => {
  it('maps finish reasons OpenAI’s clients do not know, turns object arguments into JSON text, and refuses an answer without choices', () => {
    const parsed = parseChatCompletion(
      'ovh',
      answer(200, {
        id: 'x',
        object: 'chat.completion',
        created: 1,
        model: 'm',
        choices: [
          { index: 0, message: { role: 'assistant', content: 'cut' }, finish_reason: 'model_length' },
          {
            index: 1,
            message: { role: 'assistant', content: null, tool_calls: [{ id: 't', type: 'function', function: { name: 'f', arguments: { a: 1 } } }] },
            finish_reason: 'tool_calls',
          },
        ],
      }),
    );
    expect(parsed.choices).toMatchObject([
      { finish_reason: 'length', message: { content: 'cut' } },
      { finish_reason: 'tool_calls', message: { tool_calls: [{ function: { name: 'f', arguments: '{"a":1}' } }] } },
    ]);
    const failed = answer(200, { id: 'x', choices: [{ index: 0, message: { role: 'assistant', content: '' }, finish_reason: 'error' }] });
    expect(() => parseChatCompletion('ovh', failed)).toThrow(/finish_reason "error"/);
    expect(() => parseChatCompletion('ovh', answer(200, { id: 'x', choices: [] }))).toThrow(/without choices/);
    expect(() => parseChatCompletion('ovh', answer(200, null))).toThrow(/ovh answered a chat completion with an empty body/);
    expect(() => parseChatCompletion('ovh', answer(200, '<html>oops</html>'))).toThrow(/not JSON/);
  });

  it('tells clients a provider refused the gateway’s credentials without its words, and at most 300 characters of any other message; the log gets them', () => {
    const refused = httpError('scaleway', answer(401, { error: { message: 'Invalid key sk-scw-1234****abcd for project p-42' } }));
    expect(refused.message).toBe("scaleway answered 401: it refused the gateway's credentials");
    expect(refused.detail).toContain('sk-scw-1234****abcd');
    const page =
      '<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body><center><h1>502 Bad Gateway</h1></center><hr><center>nginx/1.18.0</center></body></html>';
    const proxied = httpError('scaleway', answer(502, page));
    expect(proxied.message).toBe('scaleway answered 502: an HTML page titled "502 Bad Gateway"');
    expect(proxied.detail).toContain('nginx/1.18.0');
    expect(httpError('scaleway', answer(503, '<!DOCTYPE html><p>down</p>')).message).toBe('scaleway answered 503: an HTML page');
    expect(httpError('scaleway', answer(503, 'upstream connect error')).message).toBe('scaleway answered 503: upstream connect error');
    const long = httpError('scaleway', answer(400, { error: { message: 'x'.repeat(5000) } }));
    expect(long.message.length).toBeLessThan(340);
    expect(long.detail.length).toBeGreaterThan(4000);
  });

  it('maps a streamed model_length finish to length, and leaves OpenAI’s own chunks as they came', () => {
    const decode = openAiDecoder('ovh');
    const chunk = (finish: string | null) => ({
      id: 'c',
      object: 'chat.completion.chunk',
      created: 1,
      model: 'm',
      choices: [{ index: 0, delta: {}, finish_reason: finish }],
    });
    const [mapped] = decode({ data: JSON.stringify(chunk('model_length')), event: undefined, id: undefined }) as ChatChunk[];
    expect(mapped?.choices[0]).toMatchObject({ finish_reason: 'length' });
    const toolDelta = {
      id: 'c',
      object: 'chat.completion.chunk',
      created: 1,
      model: 'm',
      choices: [
        { index: 0, delta: { tool_calls: [{ index: 0, id: 't', type: 'function', function: { name: 'f', arguments: { a: 1 } } }] }, finish_reason: null },
      ],
    };
    const [tool] = decode({ data: JSON.stringify(toolDelta), event: undefined, id: undefined }) as ChatChunk[];
    expect(tool?.choices[0]).toMatchObject({ delta: { tool_calls: [{ function: { name: 'f', arguments: '{"a":1}' } }] } });
    const data = JSON.stringify(chunk('stop'));
    const [kept] = decode({ data, event: undefined, id: undefined }) as ChatChunk[];
    expect(chunkJson(kept as ChatChunk, 'm')).toBe(data);
  });
});

describe('a provider that cuts completions short unless told a cap (IONOS: 16 tokens)', () => {
  it('is told the request’s own cap or, without one, the most the context leaves; other providers get the body as the client sent it', () => {
    // The adapter caps completions for the IONOS vendor, told by its host.
    expect(vendorOfHost(new URL('https://openai.inference.de-txl.ionos.com/v1'))).toBe('ionos');
    for (const other of ['https://api.scaleway.ai/v1', 'http://127.0.0.1:9101/v1', 'https://ionos.com.example.org/v1']) {
      expect([other, vendorOfHost(new URL(other)) === 'ionos']).toEqual([other, false]);
    }
    const ask = { model: 'x', messages: [{ role: 'user' as const, content: 'Hallo' }] };
    expect(toUpstreamChatBody(ask, 'meta-llama/Llama-3.3-70B-Instruct', 8000)['max_tokens']).toBe(8000);
    expect(toUpstreamStreamBody(ask, 'm', 8000)['max_tokens']).toBe(8000);
    expect(toUpstreamChatBody({ ...ask, max_tokens: 50 }, 'm', 8000)['max_tokens']).toBe(50);
    const current = toUpstreamChatBody({ ...ask, max_completion_tokens: 70 }, 'm', 8000);
    expect([current['max_tokens'], current['max_completion_tokens']]).toEqual([undefined, 70]);
    expect('max_tokens' in toUpstreamChatBody(ask, 'm')).toBe(false);
    // What the context leaves rests on an estimate of the prompt, and models cap their output below their context.
    expect([sentCompletionCap(120_000), sentCompletionCap(900), sentCompletionCap(undefined)]).toEqual([4096, 900, undefined]);
  });
});

describe('OpenAI-compatible adapter against simulated Scaleway and OVHcloud', () => {
  let sim: Simulator;
  let scaleway: OpenAICompatibleAdapter;
  let ovh: OpenAICompatibleAdapter;
  const dir = mkdtempSync(join(tmpdir(), 'gw-adapter-test-'));
  const upload: SpooledUpload = { path: join(dir, 'a.wav'), size: wav(2).length, filename: 'a.wav', contentType: 'audio/wav' };

  beforeAll(async () => {
    writeFileSync(upload.path, wav(2));
    sim = await startSimulator({ latencyScale: 0, only: ['scaleway', 'ovh'] });
    scaleway = new OpenAICompatibleAdapter(providerConfig(sim, 'scaleway'));
    ovh = new OpenAICompatibleAdapter(providerConfig(sim, 'ovh'));
  });
  afterAll(async () => {
    await Promise.all([scaleway?.close(), ovh?.close()]);
    await sim?.close();
    rmSync(dir, { recursive: true, force: true });
  });
  beforeEach(() => {
    for (const p of Object.values(sim.providers)) p.reset();
  });

  it('moves reasoning written between <think> tags (Scaleway’s legacy R1 distill) into reasoning_content, whole and streamed', async () => {
    const model = 'deepseek-r1-distill-llama-70b';
    sim.providers.scaleway?.setModels([...(sim.providers.scaleway?.models() ?? []), model]);
    const body = { model: 'x', messages: [{ role: 'user' as const, content: 'Bonjour' }] };
    const whole = (await scaleway.chat(body, call(model))).choices[0] as { message: { content: string; reasoning_content?: string } };
    expect(whole.message.reasoning_content?.length).toBeGreaterThan(0);
    expect(whole.message.content.length).toBeGreaterThan(0);
    const chunks = await collect(await scaleway.chatStream(body, call(model)));
    const deltas = chunks.flatMap((c) => c.choices.map((x) => (x as { delta: { content?: string; reasoning_content?: string } }).delta));
    const content = deltas.map((d) => d.content ?? '').join('');
    const reasoning = deltas.map((d) => d.reasoning_content ?? '').join('');
    expect({ content, reasoning }).toEqual({ content: whole.message.content, reasoning: whole.message.reasoning_content });
    expect(`${content}${reasoning}`).not.toMatch(/<\/?think>/);
  });

  it('transcribes a spooled file, twice from the same spool (as failover does)', async () => {
    sim.providers.ovh?.setModels([...(sim.providers.ovh?.models() ?? []), 'whisper-large-v3']);
    for (let i = 0; i < 2; i++) {
      const t = await ovh.transcribe({ file: upload, granularities: ['word'], needSegments: true }, call('whisper-large-v3'));
      expect(t).toMatchObject({ text: 'Simulated transcript of 2.0 seconds of audio.', duration: 2, billedSeconds: 2 });
      expect(t.words).toHaveLength(7);
    }
    const sent = sim.providers.ovh?.stats().last?.body as { files: { size: number; contentType: string }[] };
    expect(sent.files[0]).toMatchObject({ size: upload.size, contentType: 'audio/wav' });
  });

  it('refuses dimensions a provider ignores with a 400, then without calling it again', async () => {
    const first = await upstreamError(() => scaleway.embeddings({ input: ['x'], dimensions: 32 }, call('bge-multilingual-gemma2')));
    expect([first.status, first.clientFault]).toEqual([400, true]);
    expect(first.message).toContain('3584-dimensional');
    const calls = sim.providers.scaleway?.stats().total;
    const second = await upstreamError(() => scaleway.embeddings({ input: ['x'], dimensions: 16 }, call('bge-multilingual-gemma2')));
    expect(second.message).toContain('3584-dimensional');
    expect(sim.providers.scaleway?.stats().total).toBe(calls);
    expect((await scaleway.embeddings({ input: ['x'] }, call('bge-multilingual-gemma2'))).vectors[0]).toHaveLength(3584);
  });

  it('reranks on Scaleway’s /v1/rerank; a provider without one answers 404 and routing moves on', async () => {
    const ranked = await scaleway.rerank({ query: 'capital', documents: ['the capital', 'a river'], topN: 1 }, call('bge-multilingual-gemma2'));
    expect(ranked.results).toEqual([{ index: 0, relevanceScore: expect.any(Number) }]);
    const none = await upstreamError(() => ovh.rerank({ query: 'q', documents: ['a'] }, call('bge-m3')));
    expect([none.status, none.retryable]).toEqual([404, true]);
  });
});
