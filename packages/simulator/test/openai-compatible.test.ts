import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Simulator, startSimulator } from '../src/index.js';
import { call, type Json, json, must, stream, upload, userMessages, wav } from './helpers.js';

let sim: Simulator;
beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0, only: ['scaleway', 'ovh', 'nebius'] });
});
afterAll(() => sim.close());
const p = (id: string) => must(sim.providers[id]);

describe.each([
  ['scaleway', 'llama-3.3-70b-instruct'],
  ['ovh', 'Meta-Llama-3_3-70B-Instruct'],
  ['nebius', 'meta-llama/Llama-3.3-70B-Instruct'],
])('%s chat', (id, model) => {
  it('answers non-streaming in the OpenAI shape with consistent usage', async () => {
    const r = await json(p(id), '/v1/chat/completions', { model, messages: userMessages('Tell me about Paris museums') });
    expect(r.status).toBe(200);
    expect(r.body.object).toBe('chat.completion');
    expect(r.body.id).toMatch(/^chatcmpl-/);
    expect(r.body.model).toBe(model);
    const choice = r.body.choices[0];
    expect(choice.finish_reason).toBe('stop');
    expect(choice.message.role).toBe('assistant');
    expect(choice.message.content).toContain('Paris museums');
    // vLLM's message model has refusal, answered null (as OpenAI's); tool_calls is its empty list.
    expect(choice.message).toMatchObject({ refusal: null, tool_calls: [] });
    const u = r.body.usage;
    expect(u.total_tokens).toBe(u.prompt_tokens + u.completion_tokens);
    expect(u.prompt_tokens).toBe(Math.ceil(('You are terse.'.length + 'Tell me about Paris museums'.length) / 4));
  });

  it('streams chunks, with the usage chunk only when include_usage is set', async () => {
    const plain = await stream(p(id), '/v1/chat/completions', { model, messages: userMessages('hello there'), stream: true });
    expect(plain.status).toBe(200);
    expect(plain.headers.get('content-type')).toContain('text/event-stream');
    expect(plain.done).toBe(true);
    expect(plain.chunks.every((c) => c.object === 'chat.completion.chunk' && c.usage === undefined)).toBe(true);
    expect(must(plain.chunks[0]).choices[0].delta.role).toBe('assistant');
    expect(must(plain.chunks.at(-1)).choices[0].finish_reason).toBe('stop');

    const withUsage = await stream(p(id), '/v1/chat/completions', {
      model,
      messages: userMessages('hello there'),
      stream: true,
      stream_options: { include_usage: true },
    });
    const last = must(withUsage.chunks.at(-1));
    expect(last.choices).toEqual([]);
    const text = withUsage.chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
    const pieces = withUsage.chunks.filter((c) => c.choices[0]?.delta?.content).length;
    expect(text).toContain('hello there');
    expect(last.usage.completion_tokens).toBe(pieces);
    expect(withUsage.chunks.slice(0, -1).every((c) => c.usage === null)).toBe(true);
  });

  it('respects max_tokens with finish_reason length', async () => {
    const r = await json(p(id), '/v1/chat/completions', { model, messages: userMessages('one two three four five six'), max_tokens: 3 });
    expect(r.body.choices[0].finish_reason).toBe('length');
    expect(r.body.usage.completion_tokens).toBe(3);
  });

  it('ignores an empty stop string, alone or in a list, and still cuts at a real one', async () => {
    const full = await json(p(id), '/v1/chat/completions', { model, messages: userMessages('Paris museums') });
    for (const stop of ['', [''], ['', 'zzz']]) {
      const r = await json(p(id), '/v1/chat/completions', { model, messages: userMessages('Paris museums'), stop });
      expect(r.body.choices[0].message.content).toBe(full.body.choices[0].message.content);
      expect(r.body.choices[0].finish_reason).toBe('stop');
    }
    const cut = await json(p(id), '/v1/chat/completions', { model, messages: userMessages('Paris museums'), stop: ['', ' about'] });
    expect(cut.body.choices[0].message.content).toBe(`Simulated answer from ${id} (${model})`);
  });

  it('rejects an unknown model and a wrong key in its own shape', async () => {
    const unknown = await json(p(id), '/v1/chat/completions', { model: 'nope', messages: userMessages('hi') });
    expect(unknown.status).toBe(id === 'scaleway' ? 422 : 404);
    // Scaleway answers a missing model as it does an unknown one; vLLM-style hosts with a 400.
    const missing = await json(p(id), '/v1/chat/completions', { messages: userMessages('hi') });
    expect(missing.status).toBe(id === 'scaleway' ? 422 : 400);
    if (id === 'scaleway') expect(missing.body.error).toMatchObject({ code: 422, param: 'model' });
    const noEmbedModel = await json(p(id), '/v1/embeddings', { input: 'hi' });
    expect(noEmbedModel.status).toBe(id === 'scaleway' ? 422 : 400);
    const bad = await json(p(id), '/v1/chat/completions', { model, messages: userMessages('hi') }, { headers: { authorization: 'Bearer wrong' } });
    expect(bad.status).toBe(id === 'scaleway' ? 403 : 401);
    if (id === 'scaleway') expect(bad.body.error.code).toBe(403);
    if (id === 'ovh') expect(bad.body).toMatchObject({ object: 'error', code: 401 });
    if (id === 'nebius') expect(typeof bad.body.detail).toBe('string');
  });
});

describe('reasoning fields', () => {
  const msg = { messages: userMessages('Why is the sky blue?') };
  it('ovh uses reasoning_content, stream and non-stream', async () => {
    const r = await json(p('ovh'), '/v1/chat/completions', { model: 'DeepSeek-R1-Distill-Llama-70B', ...msg });
    expect(r.body.choices[0].message.reasoning_content).toContain('sky blue');
    expect(r.body.usage.completion_tokens_details.reasoning_tokens).toBeGreaterThan(0);
    const s = await stream(p('ovh'), '/v1/chat/completions', { model: 'DeepSeek-R1-Distill-Llama-70B', ...msg, stream: true });
    expect(s.chunks.some((c) => typeof c.choices[0]?.delta?.reasoning_content === 'string')).toBe(true);
    expect(s.chunks.some((c) => c.choices[0]?.delta?.reasoning !== undefined)).toBe(false);
  });
  it('nebius streams delta.reasoning', async () => {
    const s = await stream(p('nebius'), '/v1/chat/completions', { model: 'deepseek-ai/DeepSeek-R1-Distill-Llama-70B', ...msg, stream: true });
    expect(s.chunks.some((c) => typeof c.choices[0]?.delta?.reasoning === 'string')).toBe(true);
    expect(s.chunks.some((c) => c.choices[0]?.delta?.reasoning_content !== undefined)).toBe(false);
  });
  it('the style can be switched at run time', async () => {
    p('nebius').configure({ reasoningStyle: 'think_tags' });
    const r = await json(p('nebius'), '/v1/chat/completions', { model: 'deepseek-ai/DeepSeek-R1-Distill-Llama-70B', ...msg });
    p('nebius').reset();
    expect(r.body.choices[0].message.content).toMatch(/^<think>\n/);
  });
});

describe('n choices', () => {
  const model = 'Meta-Llama-3_3-70B-Instruct';
  it('ovh answers n choices, whole and streamed, and counts every choice in usage', async () => {
    const whole = await json(p('ovh'), '/v1/chat/completions', { model, messages: userMessages('Paris museums'), n: 2, max_tokens: 4 });
    expect(whole.body.choices.map((c: Json) => [c.index, c.message.content, c.finish_reason])).toEqual([
      [0, 'Simulated answer from ovh', 'length'],
      [1, 'Simulated answer #2 from', 'length'],
    ]);
    expect(whole.body.usage.completion_tokens).toBe(8);
    const s = await stream(p('ovh'), '/v1/chat/completions', {
      model,
      messages: userMessages('Paris museums'),
      n: 2,
      stream: true,
      stream_options: { include_usage: true },
    });
    const text = (i: number) => s.chunks.map((c) => (c.choices[0]?.index === i ? (c.choices[0]?.delta?.content ?? '') : '')).join('');
    expect(text(0)).toBe('Simulated answer from ovh (Meta-Llama-3_3-70B-Instruct) about: Paris museums.');
    expect(text(1)).toBe('Simulated answer #2 from ovh (Meta-Llama-3_3-70B-Instruct) about: Paris museums.');
    // Interleaved as vLLM sends them: the second choice starts before the first ends.
    expect(must(s.chunks[1]).choices[0].index).toBe(1);
    const finishes = s.chunks.filter((c) => c.choices[0]?.finish_reason).map((c) => [c.choices[0].index, c.choices[0].finish_reason]);
    expect(finishes).toEqual([
      [0, 'stop'],
      [1, 'stop'],
    ]);
    const pieces = s.chunks.filter((c) => c.choices[0]?.delta?.content).length;
    expect(must(s.chunks.at(-1)).usage.completion_tokens).toBe(pieces);
  });
});

describe('logprobs', () => {
  const model = 'Meta-Llama-3_3-70B-Instruct';
  it('ovh answers OpenAI-shaped logprobs for each content token, whole and streamed alike', async () => {
    const ask = { model, messages: userMessages('Paris museums'), logprobs: true, top_logprobs: 2 };
    const whole = await json(p('ovh'), '/v1/chat/completions', ask);
    const content = whole.body.choices[0].logprobs.content as Json[];
    expect(content.map((t) => t.token).join('')).toBe(whole.body.choices[0].message.content);
    expect(Object.keys(must(content[0]))).toEqual(['token', 'logprob', 'bytes', 'top_logprobs']);
    expect(must(content[0]).top_logprobs.map((t: Json) => t.token)).toEqual([must(content[0]).token, ' the']);
    const s = await stream(p('ovh'), '/v1/chat/completions', { ...ask, stream: true });
    expect(s.chunks.flatMap((c) => c.choices[0]?.logprobs?.content ?? [])).toEqual(content);
    // The role chunk and the finish chunk carry none.
    expect(must(s.chunks[0]).choices[0].logprobs).toBeNull();
    expect(must(s.chunks.at(-1)).choices[0].logprobs).toBeNull();
    const plain = await json(p('ovh'), '/v1/chat/completions', { model, messages: userMessages('Paris museums') });
    expect(plain.body.choices[0].logprobs).toBeNull();
  });

  it('refuses top_logprobs without logprobs, or past 20', async () => {
    for (const extra of [{ top_logprobs: 2 }, { logprobs: true, top_logprobs: 21 }]) {
      const r = await json(p('nebius'), '/v1/chat/completions', { model: 'meta-llama/Llama-3.3-70B-Instruct', messages: userMessages('hi'), ...extra });
      expect(r.status).toBe(400);
    }
  });
});

describe('tool calls (OpenAI style)', () => {
  it('streams arguments incrementally with id and name on the first fragment', async () => {
    const tools = [
      { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } },
    ];
    const s = await stream(p('nebius'), '/v1/chat/completions', {
      model: 'Qwen/Qwen3-32B',
      messages: userMessages('What is the weather in Paris?'),
      tools,
      stream: true,
    });
    const frags = s.chunks.flatMap((c) => c.choices[0]?.delta?.tool_calls ?? []);
    expect(frags[0]).toMatchObject({ index: 0, type: 'function', function: { name: 'get_weather', arguments: '' } });
    expect(frags.length).toBeGreaterThan(2);
    expect(JSON.parse(frags.map((f: { function: { arguments: string } }) => f.function.arguments).join(''))).toEqual({ city: 'Paris' });
    expect(must(s.chunks.at(-1)).choices[0].finish_reason).toBe('tool_calls');
  });
});

describe('embeddings, models, rerank, transcription', () => {
  it('embeddings are deterministic; dimensions and base64 honoured on nebius, ignored on scaleway', async () => {
    const a = await json(p('nebius'), '/v1/embeddings', { model: 'BAAI/bge-m3', input: ['alpha', 'beta'] });
    const b = await json(p('nebius'), '/v1/embeddings', { model: 'BAAI/bge-m3', input: 'alpha' });
    expect(a.body.data[0].embedding).toHaveLength(1024);
    expect(a.body.data[0].embedding).toEqual(b.body.data[0].embedding);
    expect(a.body.data[1].embedding).not.toEqual(a.body.data[0].embedding);
    const small = await json(p('nebius'), '/v1/embeddings', { model: 'BAAI/bge-m3', input: 'alpha', dimensions: 64, encoding_format: 'base64' });
    expect(Buffer.from(small.body.data[0].embedding, 'base64').length).toBe(64 * 4);
    const scw = await json(p('scaleway'), '/v1/embeddings', { model: 'bge-multilingual-gemma2', input: 'alpha', dimensions: 64 });
    expect(scw.body.data[0].embedding).toHaveLength(3584);
  });

  it('nebius ?verbose=true adds pricing and regions', async () => {
    const plain = await json(p('nebius'), '/v1/models');
    expect(plain.body.data[0]).not.toHaveProperty('pricing');
    const verbose = await json(p('nebius'), '/v1/models?verbose=true');
    const llama = verbose.body.data.find((m: { id: string }) => m.id === 'meta-llama/Llama-3.3-70B-Instruct');
    expect(llama.regions).toEqual(['eu-north1']);
    expect(Number(llama.pricing.prompt)).toBeGreaterThan(0);
    expect(llama.context_length).toBe(131072);
  });

  it('scaleway rerank is Jina-style with echoed documents', async () => {
    const r = await json(p('scaleway'), '/v1/rerank', {
      model: 'bge-multilingual-gemma2',
      query: 'red apples',
      documents: ['green pears', 'red apples are sweet', 'apples'],
    });
    expect(r.body.results[0]).toMatchObject({ index: 1, document: { text: 'red apples are sweet', multi_modal: null } });
    expect(r.body.usage.total_tokens).toBeGreaterThan(0);
    expect(r.body.results.map((x: { relevance_score: number }) => x.relevance_score)).toEqual(
      [...r.body.results.map((x: { relevance_score: number }) => x.relevance_score)].sort((a, b) => b - a),
    );
  });

  it('scaleway transcription supports verbose_json, text and srt', async () => {
    const v = await upload(
      p('scaleway'),
      '/v1/audio/transcriptions',
      { model: 'whisper-large-v3', response_format: 'verbose_json', 'timestamp_granularities[]': 'word' },
      wav(2.5),
    );
    const body = (await v.json()) as Json;
    expect(body).toMatchObject({ task: 'transcribe', duration: 2.5, text: 'Simulated transcript of 2.5 seconds of audio.' });
    expect(body.segments[0]).toMatchObject({ id: 0, start: 0 });
    expect(body.words.length).toBe(7);
    // Not a WAV: timed at 16 kHz 16-bit mono.
    const mp3 = Buffer.concat([Buffer.from('ID3'), Buffer.alloc(64_000 - 3)]);
    const t = await upload(p('scaleway'), '/v1/audio/transcriptions', { model: 'voxtral-mini-3b-2507', response_format: 'text' }, mp3);
    expect(await t.text()).toBe('Simulated transcript of 2.0 seconds of audio.\n');
    const srt = await upload(p('scaleway'), '/v1/audio/transcriptions', { model: 'whisper-large-v3', response_format: 'srt' }, wav(1));
    expect(await srt.text()).toMatch(/^1\n00:00:00,000 --> 00:00:01,000\n/);
  });

  it("transcription refuses gpt-transcribe's keywords[] and languages[] for Whisper, as OpenAI's API does", async () => {
    for (const name of ['keywords[]', 'languages[]']) {
      const res = await upload(p('scaleway'), '/v1/audio/transcriptions', { model: 'whisper-large-v3', [name]: ['de'] }, wav(1));
      expect(res.status, name).toBe(400);
    }
  });

  it('ovh transcription defaults to verbose_json, numbers segments from 1 and adds success and diarization', async () => {
    const ovh = p('ovh');
    ovh.setModels([...ovh.models(), 'whisper-large-v3']);
    try {
      const r = await upload(ovh, '/v1/audio/transcriptions', { model: 'whisper-large-v3' }, wav(2.5));
      const body = (await r.json()) as Json;
      expect(body).toMatchObject({
        task: 'transcribe',
        language: 'en',
        duration: 2.5,
        success: true,
        diarization: [],
        usage: { type: 'duration', seconds: 3 },
      });
      expect(body.segments.map((s: Json) => s.id)).toEqual([1]);
      const d = await upload(ovh, '/v1/audio/transcriptions', { model: 'whisper-large-v3', diarize: 'true' }, wav(2.5));
      expect(((await d.json()) as Json).diarization).toEqual([{ speaker: 0, text: body.segments[0].text.trim(), start: 0, end: 2.5 }]);
      const plain = await upload(ovh, '/v1/audio/transcriptions', { model: 'whisper-large-v3', response_format: 'json' }, wav(1));
      expect(Object.keys((await plain.json()) as Json)).toEqual(['text', 'usage']);
    } finally {
      ovh.reset();
    }
  });

  it('refuses an input longer than the model’s context with 400 in each host’s shape (vLLM’s words), billing nothing', async () => {
    const input = ['short', 'word '.repeat(40_000)];
    const message =
      "This model's maximum context length is 8192 tokens. However, you requested 50000 tokens in the input for embedding generation. Please reduce the length of the input.";
    const scw = await json(p('scaleway'), '/v1/embeddings', { model: 'bge-multilingual-gemma2', input });
    expect([scw.status, scw.body]).toEqual([400, { error: { message, type: 'invalid_request_error', param: null, code: 400 } }]);
    const ovh = await json(p('ovh'), '/v1/embeddings', { model: 'bge-m3', input });
    expect([ovh.status, ovh.body]).toEqual([400, { object: 'error', message, type: 'BadRequestError', param: null, code: 400 }]);
    const nebius = await json(p('nebius'), '/v1/embeddings', { model: 'BAAI/bge-m3', input });
    expect([nebius.status, nebius.body]).toEqual([400, { error: { message, type: 'invalid_request_error', param: null, code: 'invalid_request' } }]);
    // At the context exactly: served.
    const full = await json(p('ovh'), '/v1/embeddings', { model: 'bge-m3', input: 'abcd'.repeat(8192) });
    expect([full.status, full.body.usage?.prompt_tokens]).toEqual([200, 8192]);
  });

  it('refuses a chat whose prompt and cap pass the model’s context with vLLM’s 400, generating nothing', async () => {
    const messages = [{ role: 'user', content: 'abcd'.repeat(131_000) }]; // 131,000 tokens
    const model = 'llama-3.3-70b-instruct'; // 131,072
    const over = await json(p('scaleway'), '/v1/chat/completions', { model, messages, max_tokens: 100 });
    expect(over.status).toBe(400);
    expect(over.body.error.message).toBe(
      "This model's maximum context length is 131072 tokens. However, you requested 131100 tokens (131000 in the messages, 100 in the completion). Please reduce the length of the messages or completion.",
    );
    const fits = await json(p('scaleway'), '/v1/chat/completions', { model, messages, max_tokens: 72 });
    expect([fits.status, fits.body.usage?.prompt_tokens]).toEqual([200, 131_000]);
  });

  it('without a cap, ends the answer where the model’s context does, with finish_reason length, whole and streamed', async () => {
    const messages = [{ role: 'user', content: 'abcd'.repeat(32_765) }]; // 3 tokens left of Qwen3-32B's 32,768
    const whole = await json(p('ovh'), '/v1/chat/completions', { model: 'Qwen3-32B', messages });
    expect([whole.body.choices[0].finish_reason, whole.body.usage.completion_tokens]).toEqual(['length', 3]);
    const s = await stream(p('ovh'), '/v1/chat/completions', { model: 'Qwen3-32B', messages, stream: true, stream_options: { include_usage: true } });
    expect(s.chunks.find((c) => c.choices[0]?.finish_reason)?.choices[0].finish_reason).toBe('length');
    expect(must(s.chunks.at(-1)).usage.completion_tokens).toBe(3);
  });

  it('scaleway refuses bytes that open no audio container with 400, as a decoder would', async () => {
    for (const model of ['whisper-large-v3', 'voxtral-mini-3b-2507']) {
      for (const bytes of [Buffer.alloc(20_000, 7), Buffer.from('%PDF-1.7 not audio'), Buffer.from([0xff, 0xff, 0xff, 0xff])]) {
        const r = await upload(p('scaleway'), '/v1/audio/transcriptions', { model }, bytes);
        expect(r.status).toBe(400);
        expect(await r.json()).toEqual({
          error: { message: 'Audio file might be corrupted or unsupported', type: 'invalid_request_error', param: 'file', code: 400 },
        });
      }
      // Each container it knows, by its first bytes.
      const heads = ['fLaC', 'OggS', '\0\0\0\x20ftypM4A ', '\x1a\x45\xdf\xa3', 'ID3\x04'].map((h) => Buffer.from(h, 'latin1'));
      heads.push(Buffer.from([0xff, 0xfb, 0x90, 0x64]));
      for (const head of heads) {
        const r = await upload(p('scaleway'), '/v1/audio/transcriptions', { model }, Buffer.concat([head, Buffer.alloc(32_000)]));
        expect(r.status, head.toString('latin1')).toBe(200);
      }
    }
  });

  it('ovh lets key-less calls through, then rate-limits them', async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await fetch(`${p('ovh').url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'Qwen3-32B', messages: userMessages('hi') }),
      });
      statuses.push(r.status);
      await r.arrayBuffer();
    }
    expect(statuses).toEqual([200, 200, 429]);
    p('ovh').reset();
  });

  it('ovh refuses a JSON payload over its 2 MB limit with 413; scaleway takes the same request', async () => {
    const image = `data:image/png;base64,${Buffer.alloc(1_700_000, 7).toString('base64')}`;
    const messages = [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'What is this?' },
          { type: 'image_url', image_url: { url: image } },
        ],
      },
    ];
    const ovh = await json(p('ovh'), '/v1/chat/completions', { model: 'Mistral-Small-3.2-24B-Instruct-2506', messages });
    expect(ovh.status).toBe(413);
    expect(ovh.body).toMatchObject({ object: 'error', code: 413 });
    expect(p('ovh').stats().last).toMatchObject({ endpoint: 'chat', status: 413 });
    const scw = await json(p('scaleway'), '/v1/chat/completions', { model: 'mistral-small-3.2-24b-instruct-2506', messages });
    expect(scw.status).toBe(200);
  });

  it('answers unknown routes with 404 and scaleway project paths with 200', async () => {
    expect((await call(p('nebius'), '/v1/nothing', {})).status).toBe(404);
    const r = await call(p('scaleway'), '/11111111-2222-3333-4444-555555555555/v1/models');
    expect(r.status).toBe(200);
  });
});
