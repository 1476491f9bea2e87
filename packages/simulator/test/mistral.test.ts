import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Simulator, startSimulator } from '../src/index.js';
import { type Json, json, must, stream, upload, userMessages, wav } from './helpers.js';

let sim: Simulator;
beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0, only: ['mistral'] });
});
afterAll(() => sim.close());
const m = () => must(sim.providers['mistral']);
const chat = '/v1/chat/completions';
const model = 'mistral-small-latest';

describe('mistral chat', () => {
  it('rejects unknown body keys with 422 extra_forbidden in the observed shape', async () => {
    const r = await json(m(), chat, { model, messages: userMessages('hi'), stream: true, stream_options: { include_usage: true }, seed: 7 });
    expect(r.status).toBe(422);
    expect(r.body).toMatchObject({ object: 'error', type: 'invalid_request_error', param: null, code: null });
    expect(r.body.message.detail).toEqual([
      { type: 'extra_forbidden', loc: ['body', 'stream_options'], msg: 'Extra inputs are not permitted', input: { include_usage: true } },
      { type: 'extra_forbidden', loc: ['body', 'seed'], msg: 'Extra inputs are not permitted', input: 7 },
    ]);
  });

  it("refuses a tool's function without parameters, and keys its tools and calls lack, with 422", async () => {
    const messages = [
      { role: 'user', content: 'weather?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'abcDEF123', type: 'function', function: { name: 'w', arguments: '{}', parsed_arguments: {} } }] },
      { role: 'tool', tool_call_id: 'abcDEF123', content: '12' },
    ];
    const r = await json(m(), chat, { model, messages, tools: [{ type: 'function', function: { name: 'w' } }] });
    expect([r.status, r.body.message.detail.map((d: { type: string; loc: unknown[] }) => [d.type, d.loc.join('.')])]).toEqual([
      422,
      [
        ['extra_forbidden', 'body.messages.1.assistant.tool_calls.0.function.parsed_arguments'],
        ['missing', 'body.tools.0.function.parameters'],
      ],
    ]);
  });

  it('refuses a temperature above 1.5 or a top_p above 1 with 422 less_than_equal, and takes 1.5', async () => {
    const hot = await json(m(), chat, { model, messages: userMessages('hi'), temperature: 1.8 });
    expect([hot.status, hot.body]).toEqual([
      422,
      {
        object: 'error',
        message: {
          detail: [{ type: 'less_than_equal', loc: ['body', 'temperature'], msg: 'Input should be less than or equal to 1.5', input: 1.8, ctx: { le: 1.5 } }],
        },
        type: 'invalid_request_error',
        param: null,
        code: null,
      },
    ]);
    const wide = await json(m(), chat, { model, messages: userMessages('hi'), top_p: 1.2 });
    expect([wide.status, wide.body.message.detail[0].loc]).toEqual([422, ['body', 'top_p']]);
    const edge = await json(m(), chat, { model, messages: userMessages('hi'), temperature: 1.5, top_p: 1 });
    expect(edge.status).toBe(200);
  });

  it('rejects reasoning_content in assistant history and accepts random_seed', async () => {
    const history = [
      { role: 'user', content: 'a' },
      { role: 'assistant', content: 'b', reasoning_content: 'x' },
      { role: 'user', content: 'c' },
    ];
    const r = await json(m(), chat, { model, messages: history });
    expect(r.status).toBe(422);
    expect(r.body.message.detail[0].loc).toEqual(['body', 'messages', 1, 'assistant', 'reasoning_content']);
    expect((await json(m(), chat, { model, messages: userMessages('hi'), random_seed: 3 })).status).toBe(200);
  });

  it('streams with usage on the last content chunk, together with finish_reason', async () => {
    const s = await stream(m(), chat, { model, messages: userMessages('Bonjour tout le monde'), stream: true });
    expect(s.done).toBe(true);
    const last = must(s.chunks.at(-1));
    expect(last.choices[0].finish_reason).toBe('stop');
    expect(typeof last.choices[0].delta.content).toBe('string');
    expect(last.choices[0].delta.content).not.toBe('');
    const contentChunks = s.chunks.filter((c) => c.choices[0].delta.content);
    expect(last.usage).toEqual({
      prompt_tokens: last.usage.prompt_tokens,
      completion_tokens: contentChunks.length,
      total_tokens: last.usage.prompt_tokens + contentChunks.length,
    });
    expect(s.chunks.slice(0, -1).every((c) => c.usage === null && c.choices[0].finish_reason === null)).toBe(true);
    expect(s.chunks.every((c) => /^[0-9a-f]{32}$/.test(c.id))).toBe(true);
    expect(s.chunks.some((c) => c.choices.length === 0)).toBe(false);
  });

  it('returns thinking chunks with reasoning_effort high, non-stream and stream', async () => {
    const body = { model: 'mistral-medium-latest', messages: userMessages('Explain tides'), reasoning_effort: 'high' };
    const r = await json(m(), chat, body);
    const content = r.body.choices[0].message.content;
    expect(content[0]).toMatchObject({ type: 'thinking', thinking: [{ type: 'text' }] });
    expect(content[1].type).toBe('text');
    expect(content[1].text).toContain('Explain tides');
    const s = await stream(m(), chat, { ...body, stream: true });
    const arrays = s.chunks.filter((c) => Array.isArray(c.choices[0].delta.content));
    expect(arrays.length).toBeGreaterThan(1);
    const transition = must(arrays.at(-1)).choices[0].delta.content;
    expect(transition.map((x: { type: string }) => x.type)).toEqual(['thinking', 'text']);
    expect(typeof must(s.chunks.at(-2)).choices[0].delta.content).toBe('string');
    const plain = await json(m(), chat, { ...body, reasoning_effort: 'none' });
    expect(typeof plain.body.choices[0].message.content).toBe('string');
  });

  it('sends a tool call whole in one chunk with a 9-char id, and rejects foreign tool ids', async () => {
    const tools = [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: { q: { type: 'string' } } } } }];
    const s = await stream(m(), chat, { model, messages: userMessages('lookup Rome'), tools, tool_choice: 'any', stream: true });
    const withCalls = s.chunks.filter((c) => c.choices[0].delta.tool_calls);
    expect(withCalls).toHaveLength(1);
    const call = must(withCalls[0]).choices[0].delta.tool_calls[0];
    expect(call.id).toMatch(/^[a-zA-Z0-9]{9}$/);
    expect(JSON.parse(call.function.arguments)).toEqual({ q: 'Rome' });
    expect(must(withCalls[0]).choices[0].finish_reason).toBe('tool_calls');
    expect(must(withCalls[0]).usage).not.toBeNull();
    const history = [
      { role: 'user', content: 'lookup Rome' },
      { role: 'assistant', content: '', tool_calls: [{ id: 'call_0fypS1hVX', type: 'function', function: { name: 'lookup', arguments: '{}' } }] },
      { role: 'tool', tool_call_id: 'call_0fypS1hVX', content: 'sunny' },
    ];
    const bad = await json(m(), chat, { model, messages: history, tools });
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({ type: 'invalid_function_call', code: '3280' });
  });

  it("tool_choice 'any' calls a tool after a tool result too; 'auto' then answers with text", async () => {
    const tools = [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: { q: { type: 'string' } } } } }];
    const history = [
      { role: 'user', content: 'lookup Rome' },
      { role: 'assistant', content: '', tool_calls: [{ id: 'a0fypS1hV', type: 'function', function: { name: 'lookup', arguments: '{}' } }] },
      { role: 'tool', tool_call_id: 'a0fypS1hV', content: 'sunny' },
    ];
    const forced = await json(m(), chat, { model, messages: history, tools, tool_choice: 'any' });
    expect(forced.status).toBe(200);
    expect(forced.body.choices[0].finish_reason).toBe('tool_calls');
    expect(forced.body.choices[0].message.tool_calls[0].function.name).toBe('lookup');
    const free = await json(m(), chat, { model, messages: history, tools, tool_choice: 'auto' });
    expect(free.body.choices[0].finish_reason).toBe('stop');
    expect(free.body.choices[0].message.tool_calls).toBeNull();
    expect(free.body.choices[0].message.content).toContain('sunny');
  });

  it('answers an unknown model and a wrong key in Mistral shapes', async () => {
    const unknown = await json(m(), chat, { model: 'mistral-huge', messages: userMessages('hi') });
    expect(unknown.status).toBe(400);
    expect(unknown.body).toMatchObject({ type: 'invalid_model', code: '1500' });
    const bad = await json(m(), chat, { model, messages: userMessages('hi') }, { headers: { authorization: 'Bearer nope' } });
    expect(bad.status).toBe(401);
    expect(bad.body.message).toBe('Unauthorized');
    expect(bad.headers.get('mistral-correlation-id')).toBeTruthy();
  });

  it('uses finish_reason length at max_tokens', async () => {
    const r = await json(m(), chat, { model, messages: userMessages('one two three four'), max_tokens: 2 });
    expect(r.body.choices[0].finish_reason).toBe('length');
    expect(r.body.usage.completion_tokens).toBe(2);
  });

  it('answers n choices, whole and streamed, with usage counting them all once on the last chunk', async () => {
    const body = { model, messages: userMessages('Paris museums'), n: 2 };
    const whole = await json(m(), chat, body);
    expect(whole.body.choices.map((c: Json) => c.index)).toEqual([0, 1]);
    expect(whole.body.choices[1].message.content).toContain('Simulated answer #2 from mistral');
    const words = (c: Json): number => c.message.content.match(/\s*\S+/g).length;
    expect(whole.body.usage.completion_tokens).toBe(words(whole.body.choices[0]) + words(whole.body.choices[1]));

    const s = await stream(m(), chat, { ...body, stream: true });
    expect(s.done).toBe(true);
    expect(s.chunks.every((c) => c.choices.length === 1)).toBe(true);
    const of = (i: number) => s.chunks.filter((c) => c.choices[0].index === i);
    for (const i of [0, 1]) {
      expect(of(i)[0]?.choices[0].delta).toEqual({ role: 'assistant', content: '' });
      expect(
        of(i)
          .map((c) => c.choices[0].delta.content ?? '')
          .join(''),
      ).toBe(whole.body.choices[i].message.content);
      expect(
        of(i)
          .filter((c) => c.choices[0].finish_reason !== null)
          .map((c) => c.choices[0].finish_reason),
      ).toEqual(['stop']);
    }
    expect(s.chunks.filter((c) => c.usage !== null)).toEqual([must(s.chunks.at(-1))]);
    expect(must(s.chunks.at(-1)).usage.completion_tokens).toBe(whole.body.usage.completion_tokens);
    const bad = await json(m(), chat, { ...body, n: 'two' });
    expect(bad.status).toBe(422);
    expect(bad.body.message.detail[0]).toMatchObject({ type: 'int_type', loc: ['body', 'n'] });
  });
});

describe('mistral models, embeddings, transcription', () => {
  it('lists models with capabilities, context, aliases and deprecation', async () => {
    const r = await json(m(), '/v1/models');
    const small = r.body.data.find((x: { id: string }) => x.id === 'mistral-small-latest');
    expect(small).toMatchObject({
      type: 'base',
      max_context_length: 131072,
      aliases: ['mistral-small-2506'],
      capabilities: { completion_chat: true, function_calling: true },
    });
    const nemo = r.body.data.find((x: { id: string }) => x.id === 'open-mistral-nemo');
    expect(nemo.deprecation).toMatch(/^2025-/);
    const vox = r.body.data.find((x: { id: string }) => x.id === 'voxtral-mini-latest');
    expect(vox.capabilities.audio_transcription).toBe(true);
  });

  it('embeds with output_dimension and rejects OpenAI dimensions', async () => {
    const r = await json(m(), '/v1/embeddings', { model: 'mistral-embed', input: ['a', 'b'], output_dimension: 256 });
    expect(r.body.data).toHaveLength(2);
    expect(r.body.data[0].embedding).toHaveLength(256);
    expect(r.body.id).toMatch(/^[0-9a-f]{32}$/);
    expect(r.body.usage).toMatchObject({ completion_tokens: 0, prompt_audio_seconds: null });
    const bad = await json(m(), '/v1/embeddings', { model: 'mistral-embed', input: 'a', dimensions: 256 });
    expect(bad.status).toBe(422);
    expect(bad.body.message.detail[0].loc).toEqual(['body', 'dimensions']);
  });

  it('refuses a chat prompt longer than the model’s context with its 3051 error, the cap not counted', async () => {
    const over = await json(m(), chat, { model, messages: [{ role: 'user', content: 'abcd'.repeat(131_073) }] });
    expect([over.status, over.body]).toEqual([
      400,
      {
        object: 'error',
        message: 'Prompt contains 131073 tokens and 0 draft tokens, too large for model with 131072 maximum context length',
        type: 'invalid_request_invalid_args',
        param: null,
        code: '3051',
        raw_status_code: 400,
      },
    ]);
    const full = await json(m(), chat, { model, messages: [{ role: 'user', content: 'abcd'.repeat(131_072) }], max_tokens: 50 });
    expect(full.status).toBe(200);
  });

  it('ends an answer the context leaves no room for with finish_reason model_length, whole and streamed; its cap with length', async () => {
    const messages = [{ role: 'user', content: 'abcd'.repeat(131_069) }]; // 3 tokens left of 131,072
    const whole = await json(m(), chat, { model, messages });
    expect([whole.body.choices[0].finish_reason, whole.body.usage.completion_tokens]).toEqual(['model_length', 3]);
    const s = await stream(m(), chat, { model, messages, stream: true });
    expect(must(s.chunks.at(-1)).choices[0].finish_reason).toBe('model_length');
    expect(must(s.chunks.at(-1)).usage.completion_tokens).toBe(3);
    const capped = await json(m(), chat, { model, messages, max_tokens: 2 });
    expect([capped.body.choices[0].finish_reason, capped.body.usage.completion_tokens]).toEqual(['length', 2]);
  });

  it('refuses an input longer than the model’s context with 400 in its error shape', async () => {
    const r = await json(m(), '/v1/embeddings', { model: 'mistral-embed', input: ['a', 'word '.repeat(40_000)] });
    expect([r.status, r.body]).toEqual([
      400,
      { object: 'error', message: 'Too many tokens in input. Max is 8192 got 50000', type: 'invalid_request_error', param: null, code: null },
    ]);
    const full = await json(m(), '/v1/embeddings', { model: 'mistral-embed', input: 'abcd'.repeat(8192) });
    expect([full.status, full.body.usage?.prompt_tokens]).toEqual([200, 8192]);
  });

  it('refuses a batch over 16,384 tokens in all with 400 in its error shape, each input within the context', async () => {
    const text = 'abcd'.repeat(6000); // 6,000 tokens
    const r = await json(m(), '/v1/embeddings', { model: 'mistral-embed', input: [text, text, text] });
    expect([r.status, r.body]).toEqual([
      400,
      { object: 'error', message: 'Too many tokens in batch. Max is 16384 got 18000', type: 'invalid_request_error', param: null, code: null },
    ]);
    const two = await json(m(), '/v1/embeddings', { model: 'mistral-embed', input: [text, text, 'abcd'.repeat(4384)] });
    expect([two.status, two.body.usage?.prompt_tokens]).toEqual([200, 16384]);
  });

  it('transcribes with Voxtral keys only', async () => {
    const res = await upload(
      m(),
      '/v1/audio/transcriptions',
      { model: 'voxtral-mini-latest', response_format: 'verbose_json', timestamp_granularities: 'segment' },
      wav(3),
    );
    const body = (await res.json()) as Record<string, unknown>;
    expect(Object.keys(body).sort()).toEqual(['language', 'model', 'segments', 'text', 'usage']);
    expect(body['text']).toBe('Simulated transcript of 3.0 seconds of audio.');
    expect(body['language']).toBeNull();
    expect(must((body['segments'] as { type: string }[])[0]).type).toBe('transcription_segment');
    expect(body['usage']).toMatchObject({ prompt_audio_seconds: 3 });
  });

  it('takes context_bias as repeated fields, at most 100 (422 past that)', async () => {
    const terms = (n: number) => Array.from({ length: n }, (_, i) => `term${i}`);
    const ok = await upload(m(), '/v1/audio/transcriptions', { model: 'voxtral-mini-latest', context_bias: terms(100) }, wav(1));
    expect(ok.status).toBe(200);
    const over = await upload(m(), '/v1/audio/transcriptions', { model: 'voxtral-mini-latest', context_bias: terms(101) }, wav(1));
    expect(over.status).toBe(422);
    const detail = ((await over.json()) as { message: { detail: { type: string; loc: string[] }[] } }).message.detail;
    expect(detail.map((d) => [d.type, d.loc])).toEqual([['too_long', ['body', 'context_bias']]]);
  });

  it('refuses an upload that is no audio with 400 in its error shape', async () => {
    const res = await upload(m(), '/v1/audio/transcriptions', { model: 'voxtral-mini-latest' }, Buffer.alloc(20_000, 7));
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({
      object: 'error',
      message: 'Invalid file: the audio could not be decoded.',
      type: 'invalid_request_error',
      param: null,
      code: null,
    });
  });
});
