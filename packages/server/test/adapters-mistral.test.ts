import { createServer } from 'node:http';
import { type Simulator, startSimulator } from '@gw/simulator';
import { ChatCompletionStream } from 'openai/lib/ChatCompletionStream';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { UpstreamHttp } from '../src/providers/http-client.js';
import { parseVoxtral, voxtralFields } from '../src/providers/mistral/audio.js';
import { mistralToolId, parseMistralCompletion, splitContent, toMistralChatBody } from '../src/providers/mistral/chat.js';
import { toMistralEmbeddingsBody } from '../src/providers/mistral/embeddings.js';
import { mistralError } from '../src/providers/mistral/errors.js';
import { MistralAdapter } from '../src/providers/mistral/index.js';
import { parseMistralModels } from '../src/providers/mistral/models.js';
import { mistralChunkStream } from '../src/providers/mistral/stream.js';
import { answer, call, collect, providerConfig, scannedList, sseBody, upstreamError } from './helpers/adapters.js';

const http = new UpstreamHttp('mistral', 'http://127.0.0.1:9', 1000);

describe('Mistral adapter fixtures: request mapping', () => {
  it('keeps only what Mistral’s strict schema accepts, renaming seed and max_completion_tokens', () => {
    const body = toMistralChatBody(
      {
        model: 'mistral/small',
        messages: [{ role: 'user', content: 'hi', name: 'ann' }],
        seed: 7,
        max_completion_tokens: 50,
        stream_options: { include_usage: true },
        user: 'u1',
        logprobs: true,
        temperature: 0.3,
        reasoning_effort: 'low',
        tool_choice: 'required',
      },
      'mistral-small-latest',
      true,
    );
    expect(body).toEqual({
      model: 'mistral-small-latest',
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
      random_seed: 7,
      max_tokens: 50,
      temperature: 0.3,
      reasoning_effort: 'high',
      tool_choice: 'required',
    });
  });

  it('cleans the history: developer → system, no reasoning, tool-call ids made 9 alphanumerics the same way in call and result', () => {
    const body = toMistralChatBody(
      {
        model: 'm',
        messages: [
          { role: 'developer', content: 'be brief' },
          { role: 'user', content: 'weather?' },
          {
            role: 'assistant',
            content: [
              { type: 'thinking', thinking: [{ type: 'text', text: 'hmm' }] },
              { type: 'text', text: 'checking' },
            ],
            reasoning_content: 'hmm',
            tool_calls: [{ id: 'call_0fypS1hVXabc', type: 'function', function: { name: 'weather', arguments: '{}' } }],
          },
          { role: 'tool', tool_call_id: 'call_0fypS1hVXabc', content: 'sunny' },
        ],
      },
      'mistral-small-latest',
      false,
    );
    const [system, , assistant, tool] = body.messages as Record<string, unknown>[];
    expect(system).toEqual({ role: 'system', content: 'be brief' });
    expect(assistant?.content).toBe('checking');
    expect(assistant?.reasoning_content).toBeUndefined();
    const id = (assistant?.tool_calls as { id: string }[] | undefined)?.[0]?.id;
    expect(id).toMatch(/^[a-zA-Z0-9]{9}$/);
    expect(tool?.tool_call_id).toBe(id);
    expect(mistralToolId('Ab3dE6gH9')).toBe('Ab3dE6gH9');
  });

  it('maps dimensions to output_dimension, and Voxtral’s form has no response_format, prompt, or language with timings', () => {
    expect(toMistralEmbeddingsBody({ input: ['a'], dimensions: 256 }, ['a'], 'mistral-embed')).toEqual({
      model: 'mistral-embed',
      input: ['a'],
      output_dimension: 256,
    });
    const file = { path: '/x', size: 1, filename: 'a.wav', contentType: 'audio/wav' };
    const withLanguage = voxtralFields({ file, language: 'fr', prompt: 'p', granularities: ['segment'], needSegments: true }, 'voxtral-mini-latest');
    expect(withLanguage).toEqual({
      fields: [
        ['model', 'voxtral-mini-latest'],
        ['language', 'fr'],
      ],
      granularity: null,
    });
    const srt = voxtralFields({ file, granularities: [], needSegments: true, temperature: 0 }, 'voxtral-mini-latest');
    expect(srt.fields).toEqual([
      ['model', 'voxtral-mini-latest'],
      ['temperature', '0'],
      ['timestamp_granularities', 'segment'],
    ]);
  });
});

describe('Mistral adapter fixtures: responses, stream chunks, errors', () => {
  it('reads Voxtral’s usage: its seconds, and its tokens (audio and prompt in, transcript out) for an offer priced per token', () => {
    const file = { path: '/x', size: 1, filename: 'a.wav', contentType: 'audio/wav' };
    const request = { file, granularities: [], needSegments: false };
    const body = { model: 'voxtral-mini-latest', text: 'Hello and welcome to the meeting.', language: 'en', segments: [] };
    const t = parseVoxtral(
      'mistral',
      answer(200, { ...body, usage: { prompt_audio_seconds: 4, prompt_tokens: 50, completion_tokens: 12, total_tokens: 62 } }),
      request,
      null,
    );
    expect(t).toMatchObject({ billedSeconds: 4, tokens: { input: 50, output: 12 } });
    expect(parseVoxtral('mistral', answer(200, { ...body, usage: { prompt_audio_seconds: 4 } }), request, null).tokens).toBeNull();
  });

  it('maps thinking content to reasoning_content, model_length to length, object arguments to strings', () => {
    const completion = parseMistralCompletion(
      'mistral',
      answer(200, {
        id: 'a1b2',
        object: 'chat.completion',
        created: 1,
        model: 'mistral-medium-latest',
        choices: [
          {
            index: 0,
            message: {
              role: 'assistant',
              content: [
                { type: 'thinking', thinking: [{ type: 'text', text: 'Let me think.' }] },
                { type: 'text', text: 'Bonjour' },
              ],
              tool_calls: [{ id: 'Ab3dE6gH9', type: 'function', function: { name: 'f', arguments: { a: 1 } }, index: 0 }],
              prefix: false,
            },
            finish_reason: 'model_length',
          },
        ],
        usage: { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7, num_cached_tokens: 0, prompt_audio_seconds: null },
      }),
    );
    expect(completion.choices[0]).toEqual({
      index: 0,
      message: {
        role: 'assistant',
        content: 'Bonjour',
        refusal: null,
        reasoning_content: 'Let me think.',
        tool_calls: [{ id: 'Ab3dE6gH9', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }],
      },
      logprobs: null,
      finish_reason: 'length',
    });
    expect(completion.usage).toEqual({ prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 });
  });

  it('takes thinking given as a bare string, not only as its documented list of text chunks', () => {
    expect(
      splitContent([
        { type: 'thinking', thinking: 'Hmm.' },
        { type: 'text', text: 'Oui' },
      ]),
    ).toEqual({ content: 'Oui', reasoning: 'Hmm.' });
  });

  it('answers a tool call with content null, as OpenAI does, where Mistral sends an empty string', () => {
    const toolCall = { id: 'Ab3dE6gH9', type: 'function', function: { name: 'f', arguments: '{}' } };
    const completion = parseMistralCompletion(
      'mistral',
      answer(200, {
        id: 'a1',
        object: 'chat.completion',
        created: 1,
        model: 'mistral-small-latest',
        choices: [{ index: 0, message: { role: 'assistant', content: '', tool_calls: [toolCall] }, finish_reason: 'tool_calls' }],
        usage: { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 },
      }),
    );
    expect((completion.choices[0] as { message: unknown }).message).toEqual({ role: 'assistant', content: null, refusal: null, tool_calls: [toolCall] });
  });

  it('normalises the stream: thinking arrays, the transition chunk, and usage split off the last content chunk', async () => {
    const base = { id: 'f00', object: 'chat.completion.chunk', created: 1, model: 'mistral-medium-latest' };
    const chunk = (delta: unknown, finish: string | null = null, usage: unknown = null) =>
      JSON.stringify({ ...base, choices: [{ index: 0, delta, finish_reason: finish }], usage });
    const chunks = await collect(
      mistralChunkStream(
        http,
        sseBody([
          chunk({ role: 'assistant', content: '' }),
          chunk({ content: [{ type: 'thinking', thinking: [{ type: 'text', text: 'Hmm' }] }] }),
          chunk({
            content: [
              { type: 'thinking', thinking: [], closed: true },
              { type: 'text', text: 'Bon' },
            ],
          }),
          chunk({ content: 'jour' }, 'stop', { prompt_tokens: 2, completion_tokens: 3, total_tokens: 5 }),
          '[DONE]',
        ]),
      ),
    );
    expect(chunks.map((c) => c.choices.map((x) => (x as { delta: unknown }).delta))).toEqual([
      [{ role: 'assistant', content: '' }],
      [{ reasoning_content: 'Hmm' }],
      [{ content: 'Bon' }],
      [{ content: 'jour' }],
      [{}],
      [],
    ]);
    // As OpenAI ends a choice: the last words, then an empty delta with the reason, then the usage.
    expect(chunks[3]).toMatchObject({ usage: null, choices: [{ finish_reason: null }] });
    expect(chunks[4]).toMatchObject({ usage: null, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] });
    expect(chunks[5]).toMatchObject({ object: 'chat.completion.chunk', choices: [], usage: { prompt_tokens: 2, completion_tokens: 3, total_tokens: 5 } });
  });

  it('ends a streamed tool call as OpenAI does, so the OpenAI SDK stream helper sees its arguments done', async () => {
    const base = { id: 'f01', object: 'chat.completion.chunk', created: 1, model: 'mistral-small-latest' };
    const call = { id: 'a1B2c3D4e', function: { name: 'weather', arguments: '{"city":"Paris"}' } };
    const chunks = await collect(
      mistralChunkStream(
        http,
        sseBody([
          JSON.stringify({ ...base, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] }),
          JSON.stringify({ ...base, choices: [{ index: 0, delta: { tool_calls: [call] }, finish_reason: 'tool_calls' }] }),
          '[DONE]',
        ]),
      ),
    );
    expect(chunks.map((c) => c.choices.map((x) => (x as { finish_reason: unknown }).finish_reason))).toEqual([[null], [null], ['tool_calls']]);
    const deltaOf = (i: number) => (chunks[i]?.choices[0] as { delta?: { tool_calls?: unknown[] } } | undefined)?.delta;
    expect(deltaOf(1)?.tool_calls).toHaveLength(1);
    expect(deltaOf(2)).toEqual({});
    // The OpenAI SDK's helper, fed those chunks, reports the call's arguments done.
    const events: string[] = [];
    const stream = ChatCompletionStream.fromReadableStream(
      new ReadableStream({
        start(controller) {
          for (const c of chunks) controller.enqueue(new TextEncoder().encode(`${JSON.stringify(c)}\n`));
          controller.close();
        },
      }),
    );
    stream.on('tool_calls.function.arguments.done', (e) => events.push(`${e.name} ${e.arguments}`));
    await stream.finalChatCompletion();
    expect(events).toEqual(['weather {"city":"Paris"}']);
  });

  it('throws on Mistral’s own error object mid-stream and on an end without [DONE]', async () => {
    const mid = await upstreamError(() =>
      collect(mistralChunkStream(http, sseBody([JSON.stringify({ object: 'error', message: 'Service tier capacity exceeded', type: 'x', code: '3505' })]))),
    );
    expect([mid.kind, mid.status]).toEqual(['http', 502]);
    expect(mid.message).toContain('capacity exceeded');
    const cut = await upstreamError(() =>
      collect(mistralChunkStream(http, sseBody([JSON.stringify({ id: 'x', choices: [{ index: 0, delta: { content: 'a' } }] })]))),
    );
    expect(cut.kind).toBe('protocol');
  });

  it('maps every error shape: 422 detail lists, 400 invalid_model as 404, 429 with Retry-After, 401 detail', () => {
    const strict = mistralError(
      'mistral',
      answer(422, {
        object: 'error',
        message: { detail: [{ type: 'extra_forbidden', loc: ['body', 'stream_options'], msg: 'Extra inputs are not permitted' }] },
        type: 'invalid_request_error',
      }),
    );
    expect([strict.status, strict.clientFault]).toEqual([422, true]);
    expect(strict.message).toContain('body.stream_options: Extra inputs are not permitted');
    const model = mistralError('mistral', answer(400, { object: 'error', message: 'Invalid model: x', type: 'invalid_model', code: '1500' }));
    expect([model.status, model.retryable, model.clientFault]).toEqual([404, true, false]);
    // The same code as a number, under another type.
    const numeric = mistralError('mistral', answer(400, { object: 'error', message: 'Invalid model: x', type: 'invalid_request_error', code: 1500 }));
    expect([numeric.status, numeric.retryable]).toEqual([404, true]);
    const limited = mistralError('mistral', answer(429, { message: 'Requests rate limit exceeded' }, { 'retry-after': '7' }));
    expect([limited.status, limited.retryAfterS, limited.retryable]).toEqual([429, 7, true]);
    expect(mistralError('mistral', answer(401, { detail: 'Unauthorized' })).detail).toContain('Unauthorized');
    // An answer without choices, or not JSON, is the provider failing: it fails over.
    expect(() => parseMistralCompletion('mistral', answer(200, { id: 'x', choices: [] }))).toThrow(/without choices/);
    expect(() => parseMistralCompletion('mistral', answer(200, '<html>'))).toThrow(/not JSON/);
    expect(parseMistralModels('mistral', scannedList(200, { object: 'list', data: [{ id: 'a-2506', aliases: ['a-latest'] }, { id: 'b' }] }, true))).toEqual([
      'a-2506',
      'a-latest',
      'b',
    ]);
  });
});

describe('Mistral adapter against the simulated La Plateforme', () => {
  let sim: Simulator;
  let adapter: MistralAdapter;
  beforeAll(async () => {
    sim = await startSimulator({ latencyScale: 0, only: ['mistral'] });
    adapter = new MistralAdapter(providerConfig(sim, 'mistral'));
  });
  afterAll(async () => {
    await adapter?.close();
    await sim?.close();
  });
  beforeEach(() => sim.providers.mistral?.reset());

  it('lists models with their aliases', async () => {
    const models = await adapter.listModels();
    expect(models).toEqual(expect.arrayContaining(['mistral-small-latest', 'mistral-small-2506', 'open-mistral-nemo-2407', 'mistral-embed']));
  });

  it('chats with an OpenAI body the strict schema would refuse as is, including a foreign tool-call history', async () => {
    const completion = await adapter.chat(
      {
        model: 'mistral/small',
        seed: 1,
        stream_options: { include_usage: true },
        user: 'someone',
        tools: [{ type: 'function', function: { name: 'weather', parameters: { type: 'object', properties: {} } } }],
        messages: [
          { role: 'user', content: 'Weather in Paris?' },
          {
            role: 'assistant',
            content: null,
            tool_calls: [{ id: 'call_from_another_provider', type: 'function', function: { name: 'weather', arguments: '{}' } }],
          },
          { role: 'tool', tool_call_id: 'call_from_another_provider', content: 'Sunny' },
        ],
      },
      call('mistral-small-latest'),
    );
    expect(completion.choices[0]).toMatchObject({ finish_reason: 'stop', message: { role: 'assistant' } });
    expect((completion.choices[0] as { message: { content: string } }).message.content).toContain('Sunny');
    expect(completion.usage?.total_tokens).toBeGreaterThan(0);
  });

  it('streams thinking as reasoning_content and ends with a usage chunk', async () => {
    const chunks = await collect(
      await adapter.chatStream(
        { model: 'mistral/medium', messages: [{ role: 'user', content: 'Think about Lyon' }], reasoning_effort: 'high' },
        call('mistral-medium-latest'),
      ),
    );
    const reasoning = chunks.flatMap((c) => c.choices.map((x) => (x as { delta: { reasoning_content?: string } }).delta.reasoning_content ?? '')).join('');
    const content = chunks
      .flatMap((c) => c.choices.map((x) => (x as { delta: { content?: unknown } }).delta.content))
      .filter((x) => typeof x === 'string')
      .join('');
    expect(reasoning.length).toBeGreaterThan(0);
    expect(content).toContain('Lyon');
    expect(chunks.every((c) => c.choices.every((x) => typeof (x as { delta: { content?: unknown } }).delta.content !== 'object'))).toBe(true);
    expect(chunks.at(-1)).toMatchObject({ choices: [] });
    expect(chunks.at(-1)?.usage?.completion_tokens).toBeGreaterThan(0);
  });

  it('answers n choices, whole and streamed, each ended on its own and the usage of all of them in one chunk', async () => {
    const body = { model: 'mistral/large', messages: [{ role: 'user' as const, content: 'Lyon' }], n: 2 };
    const completion = await adapter.chat(body, call('mistral-large-latest'));
    expect(completion.choices.map((c) => (c as { index: number }).index)).toEqual([0, 1]);
    const chunks = await collect(await adapter.chatStream(body, call('mistral-large-latest')));
    const finishes = chunks.flatMap((c) => c.choices.filter((x) => (x as { finish_reason: unknown }).finish_reason !== null));
    expect(finishes.map((x) => (x as { index: number }).index).sort()).toEqual([0, 1]);
    const usages = chunks.filter((c) => c.usage);
    expect(usages).toHaveLength(1);
    expect(usages[0]).toMatchObject({ choices: [], usage: { completion_tokens: completion.usage?.completion_tokens } });
  });

  it('maps the provider’s errors: a model it lacks (404, next offer), 429 with Retry-After, a wrong key 401', async () => {
    const lacking = await upstreamError(() => adapter.chat({ model: 'x', messages: [{ role: 'user', content: 'x' }] }, call('no-such-model')));
    expect([lacking.status, lacking.retryable]).toEqual([404, true]);
    sim.providers.mistral?.setFault({ kind: 'status', status: 429, retryAfter: 3, times: 1 });
    const limited = await upstreamError(() => adapter.embeddings({ input: ['x'] }, call('mistral-embed')));
    expect([limited.status, limited.retryAfterS]).toEqual([429, 3]);
    const wrongKey = new MistralAdapter(providerConfig(sim, 'mistral', { apiKey: 'wrong' }));
    const denied = await upstreamError(() => wrongKey.listModels());
    expect([denied.status, denied.retryable]).toEqual([401, true]);
    await wrongKey.close();
  });
});

describe('Mistral embeddings over its batch limit', () => {
  it('sends again in halves a call Mistral refuses as over its limit (text denser than the estimate), in order, paying only what it answered', async () => {
    const bodies: string[][] = [];
    // A Mistral whose tokenizer counts a token per character, past the gateway's estimate of one per 3.
    const host = createServer((req, res) => {
      let text = '';
      req.on('data', (d) => {
        text += d;
      });
      req.on('end', () => {
        const input = (JSON.parse(text) as { input: string[] }).input;
        bodies.push(input);
        const tokens = input.reduce((n, t) => n + t.length, 0);
        res.writeHead(tokens > 16_384 ? 400 : 200, { 'content-type': 'application/json' });
        if (tokens > 16_384) {
          const message = `Too many tokens in batch. Max is 16384 got ${tokens}`;
          res.end(JSON.stringify({ object: 'error', message, type: 'invalid_request_error', param: null, code: null }));
          return;
        }
        const data = input.map((t, index) => ({ object: 'embedding', embedding: [Number.parseInt(t, 10)], index }));
        res.end(JSON.stringify({ id: 'e', object: 'list', model: 'mistral-embed', data, usage: { prompt_tokens: tokens, total_tokens: tokens } }));
      });
    });
    await new Promise<void>((r) => host.listen(0, '127.0.0.1', r));
    const baseUrl = `http://127.0.0.1:${(host.address() as { port: number }).port}`;
    const adapter = new MistralAdapter({ id: 'mistral', type: 'mistral', baseUrl: `${baseUrl}/v1`, apiKey: 'k', region: 'eu' });
    try {
      // 20 texts of 1,000 characters: 6,680 tokens as estimated, 20,000 as this Mistral counts.
      const input = Array.from({ length: 20 }, (_, i) => `${i} `.padEnd(1000, 'x'));
      const paid: number[] = [];
      const result = await adapter.embeddings({ input }, { ...call('mistral-embed'), paid: (p) => paid.push(p.promptTokens) });
      expect(bodies.map((b) => b.length)).toEqual([20, 10, 10]);
      expect(result.vectors).toEqual(input.map((_, i) => [i]));
      expect(result.promptTokens).toBe(20_000);
      // The refused call was not paid; the first half was, while the second followed.
      expect(paid).toEqual([10_000]);
      // One input over the limit alone is not split further: Mistral's 400 is the answer.
      const err = await upstreamError(() => adapter.embeddings({ input: ['1 '.padEnd(17_000, 'x')] }, call('mistral-embed')));
      expect([err.status, err.detail]).toEqual([400, 'mistral answered 400: Too many tokens in batch. Max is 16384 got 17000']);
    } finally {
      await adapter.close();
      host.close();
    }
  });
});
