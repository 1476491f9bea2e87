import { createOpenAI } from '@ai-sdk/openai';
import {
  APICallError,
  embed,
  embedMany,
  generateObject,
  generateText,
  stepCountIs,
  streamObject,
  streamText,
  tool,
  experimental_transcribe as transcribe,
} from 'ai';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { wav } from './helpers/audio.js';
import { resetProviders, type TestGateway } from './helpers/gateway.js';
import { aiSdkGatewayPerFile } from './helpers/sdk.js';

// The Vercel AI SDK's OpenAI provider (`@ai-sdk/openai` 4 with `ai` 7) pointed at both variants, as its users point it
// at an OpenAI-compatible base: openai.chat (text, streams, reasoning models, tools over several steps, objects from a
// schema, its providerOptions), openai.embedding, openai.transcription, and the errors it reads (APICallError) and
// retries after their Retry-After.
let gw: TestGateway;
let key: string;

aiSdkGatewayPerFile((started) => ({ gw, key } = started));

const pinned = (provider: string) => ({ 'X-Gateway-Provider': provider });

function sent(provider: string): Record<string, unknown> {
  return gw.sim.providers[provider]?.stats().last?.body as Record<string, unknown>;
}

/** Two tools a prompt naming both calls in one step, each recording the city it was called for. */
function weatherAndTime(calls: string[]) {
  return {
    get_weather: tool({
      description: 'The weather in a city',
      inputSchema: z.object({ city: z.string() }),
      execute: async ({ city }) => {
        calls.push(`weather ${city}`);
        return { temp: 20 };
      },
    }),
    get_time: tool({
      description: 'The time in a city',
      inputSchema: z.object({ city: z.string() }),
      execute: async ({ city }) => {
        calls.push(`time ${city}`);
        return { time: '12:00' };
      },
    }),
  };
}

const Person = z.object({ name: z.string(), age: z.number(), hobbies: z.array(z.string()) });

describe.each([
  ['A', () => gw.baseA],
  ['B', () => gw.baseB],
])('variant %s through @ai-sdk/openai', (_v, base) => {
  const openai = (apiKey = key) => createOpenAI({ baseURL: base(), apiKey });

  it('generateText and streamText: the same text, usage, finishReason and the response’s id and model', async () => {
    resetProviders(gw.sim);
    const ask = { model: openai().chat('mistral/small'), prompt: 'Tell me about Lyon', headers: pinned('scaleway') };
    const whole = await generateText(ask);
    expect(whole.text).toBe('Simulated answer from scaleway (mistral-small-3.2-24b-instruct-2506) about: Tell me about Lyon.');
    expect(whole.finishReason).toBe('stop');
    expect(whole.usage).toMatchObject({ inputTokens: 5, outputTokens: 10, totalTokens: 15 });
    expect(whole.providerMetadata).toEqual({ openai: {} });
    expect(whole.response.id).toMatch(/^chatcmpl-/);
    expect(whole.response.modelId).toBe('mistral/small');
    expect(whole.response.headers?.['x-gateway-provider']).toBe('scaleway');
    expect(whole.response.headers?.['x-request-id']).toMatch(/^req_/);

    const streamed = streamText(ask);
    const types = new Set<string>();
    for await (const part of streamed.fullStream) {
      if (part.type === 'error') throw part.error;
      types.add(part.type);
    }
    expect([...types]).toEqual(expect.arrayContaining(['start', 'text-start', 'text-delta', 'text-end', 'finish-step', 'finish']));
    expect(await streamed.text).toBe(whole.text);
    expect(await streamed.finishReason).toBe('stop');
    expect(await streamed.usage).toMatchObject({ inputTokens: 5, outputTokens: 10, totalTokens: 15 });
    expect((await streamed.response).modelId).toBe('mistral/small');
    // The SDK always asks a stream for its usage.
    expect(sent('scaleway')['stream_options']).toEqual({ include_usage: true });

    const cut = await generateText({ ...ask, maxOutputTokens: 3 });
    expect([cut.finishReason, cut.usage.outputTokens]).toEqual(['length', 3]);
    expect(sent('scaleway')['max_tokens']).toBe(3);
  });

  it('a reasoning model: the answer without its reasoning, which is counted in usage; max tokens as max_completion_tokens', async () => {
    resetProviders(gw.sim);
    for (const provider of ['ovh', 'nebius']) {
      const ask = {
        model: openai().chat('deepseek/r1-distill-70b'),
        system: 'Be brief',
        prompt: 'Why is the sky blue?',
        maxOutputTokens: 200,
        headers: pinned(provider),
        // For a model id the SDK does not know as a reasoning model (OpenAI's o-series, gpt-5): a system message
        // is then sent as developer, and the cap as max_completion_tokens.
        providerOptions: { openai: { forceReasoning: true, reasoningEffort: 'high' } },
      };
      const whole = await generateText(ask);
      expect(whole.text, provider).toBe(
        `Simulated answer from ${provider} (${provider === 'ovh' ? 'DeepSeek-R1-Distill-Llama-70B' : 'deepseek-ai/DeepSeek-R1-Distill-Llama-70B'}) about: Why is the sky blue.`,
      );
      // This provider reads no reasoning from chat completions (OpenAI sends none); its tokens are counted.
      expect(whole.reasoningText).toBeUndefined();
      expect(whole.usage.outputTokenDetails.reasoningTokens, provider).toBeGreaterThan(0);
      expect(whole.usage.outputTokenDetails.textTokens).toBe(11);
      const body = sent(provider);
      expect([body['max_completion_tokens'], body['max_tokens'], body['reasoning_effort']]).toEqual([200, undefined, 'high']);
      // The SDK's developer message reaches a vLLM host as the system message it reads (docs/adapters.md).
      expect((body['messages'] as { role: string; content: string }[]).map((m) => [m.role, m.content])).toEqual([
        ['system', 'Be brief'],
        ['user', 'Why is the sky blue?'],
      ]);

      const streamed = streamText(ask);
      for await (const part of streamed.fullStream) if (part.type === 'error') throw part.error;
      expect(await streamed.text).toBe(whole.text);
      expect(await streamed.reasoningText).toBeUndefined();
      expect((await streamed.usage).outputTokenDetails.reasoningTokens).toBe(whole.usage.outputTokenDetails.reasoningTokens);
    }
    // Mistral's thinking (reasoning_effort high on mistral/medium) does not reach the text either.
    const mistral = await generateText({
      model: openai().chat('mistral/medium'),
      prompt: 'Why is the sky blue?',
      providerOptions: { openai: { reasoningEffort: 'high' } },
    });
    expect(mistral.text).toBe('Simulated answer from mistral (mistral-medium-latest) about: Why is the sky blue.');
    expect(sent('mistral')['reasoning_effort']).toBe('high');
  });

  it.each(['mistral', 'ovh', 'azure', 'nebius'])('tools over steps, two calls in one step (%s), whole and streamed', async (provider) => {
    resetProviders(gw.sim);
    const model = { mistral: 'mistral/small', ovh: 'mistral/small', azure: 'openai/gpt-4o-mini', nebius: 'meta/llama-3.3-70b' }[provider] as string;
    const ask = {
      model: openai().chat(model),
      prompt: 'get_weather for Paris, get_time for Berlin',
      headers: pinned(provider),
      stopWhen: stepCountIs(5),
      providerOptions: { openai: { parallelToolCalls: true, user: 'user-1' } },
    };
    const calls: string[] = [];
    const whole = await generateText({ ...ask, tools: weatherAndTime(calls) });
    expect(calls).toEqual(['weather Paris', 'time Berlin']);
    expect(whole.steps.map((s) => s.finishReason)).toEqual(['tool-calls', 'stop']);
    const [first] = whole.steps;
    expect(first?.toolCalls.map((c) => [c.toolName, c.input])).toEqual([
      ['get_weather', { city: 'Paris' }],
      ['get_time', { city: 'Berlin' }],
    ]);
    expect(new Set(first?.toolCalls.map((c) => c.toolCallId)).size).toBe(2);
    expect(whole.text).toContain(provider);
    // ai 7: `usage` is the sum over the steps (ai 6's was the last step's), more than the last step alone.
    const total = whole.steps.reduce((n, s) => n + (s.usage.totalTokens ?? 0), 0);
    expect([whole.usage.totalTokens, whole.totalUsage.totalTokens]).toEqual([total, total]);
    expect(total).toBeGreaterThan(whole.steps.at(-1)?.usage.totalTokens ?? 0);
    // The second step sent both calls back and both results, each under its call's id.
    const messages = sent(provider)['messages'] as { role: string; tool_call_id?: string; tool_calls?: { id: string }[] }[];
    const [asked, ...results] = messages.slice(1);
    expect(asked?.tool_calls?.map((c) => c.id)).toEqual(first?.toolCalls.map((c) => c.toolCallId));
    expect(results.map((m) => [m.role, m.tool_call_id])).toEqual(first?.toolCalls.map((c) => ['tool', c.toolCallId]));

    const streamedCalls: string[] = [];
    const streamed = streamText({ ...ask, tools: weatherAndTime(streamedCalls) });
    for await (const part of streamed.fullStream) if (part.type === 'error') throw part.error;
    expect(streamedCalls).toEqual(['weather Paris', 'time Berlin']);
    expect((await streamed.steps).map((s) => s.toolCalls.length)).toEqual([2, 0]);
    expect(await streamed.text).toBe(whole.text);
    // Each streamed step has its usage (stream_options.include_usage), summed as whole.
    expect((await streamed.steps).map((s) => s.usage.totalTokens)).toEqual(whole.steps.map((s) => s.usage.totalTokens));
    expect((await streamed.usage).totalTokens).toBe(total);

    // parallelToolCalls false: one call a step.
    const single: string[] = [];
    const one = await generateText({ ...ask, tools: weatherAndTime(single), providerOptions: { openai: { parallelToolCalls: false } } });
    expect(one.steps[0]?.toolCalls).toHaveLength(1);
    expect(sent(provider)['parallel_tool_calls'] ?? false).toBe(false);
  });

  it.each(['mistral', 'scaleway', 'azure', 'nebius'])('generateObject and streamObject (%s): json_schema with strict, the object parsed', async (provider) => {
    resetProviders(gw.sim);
    const model = { mistral: 'mistral/small', scaleway: 'mistral/small', azure: 'openai/gpt-4o-mini', nebius: 'meta/llama-3.3-70b' }[provider] as string;
    const ask = {
      model: openai().chat(model),
      schema: Person,
      schemaName: 'person',
      schemaDescription: 'A person',
      prompt: 'Describe a person',
      headers: pinned(provider),
    };
    const whole = await generateObject(ask);
    expect(Person.safeParse(whole.object).success).toBe(true);
    expect(whole.finishReason).toBe('stop');
    expect(whole.usage.totalTokens).toBeGreaterThan(0);
    const format = sent(provider)['response_format'] as { type: string; json_schema: Record<string, unknown> };
    expect(format.type).toBe('json_schema');
    expect(format.json_schema).toMatchObject({
      name: 'person',
      strict: true,
      schema: { type: 'object', required: ['name', 'age', 'hobbies'], additionalProperties: false },
    });
    if (provider !== 'mistral') expect(format.json_schema['description']).toBe('A person');

    const streamed = streamObject(ask);
    const partials: unknown[] = [];
    for await (const partial of streamed.partialObjectStream) partials.push(partial);
    expect(partials.length).toBeGreaterThan(1);
    expect(await streamed.object).toEqual(whole.object);
    expect((await streamed.usage).totalTokens).toBeGreaterThan(0);
  });

  it('providerOptions.openai: user, logprobs (whole and streamed), maxCompletionTokens, store, metadata, serviceTier, textVerbosity, promptCacheKey, safetyIdentifier', async () => {
    resetProviders(gw.sim);
    const model = openai().chat('meta/llama-3.3-70b');
    const headers = pinned('nebius');
    const withLogprobs = await generateText({ model, prompt: 'Tell me about Lyon', headers, providerOptions: { openai: { logprobs: 2, user: 'user-1' } } });
    const logprobs = withLogprobs.providerMetadata?.['openai']?.['logprobs'] as { token: string; top_logprobs: unknown[] }[];
    expect(logprobs.map((l) => l.token).join('')).toBe(withLogprobs.text);
    expect(logprobs.every((l) => l.top_logprobs.length === 2)).toBe(true);
    expect(sent('nebius')).toMatchObject({ logprobs: true, top_logprobs: 2, user: 'user-1' });
    const streamed = streamText({ model, prompt: 'Tell me about Lyon', headers, providerOptions: { openai: { logprobs: true } } });
    for await (const part of streamed.fullStream) if (part.type === 'error') throw part.error;
    expect((await streamed.providerMetadata)?.['openai']?.['logprobs']).toHaveLength(logprobs.length);

    const capped = await generateText({ model, prompt: 'Tell me about Lyon', headers, providerOptions: { openai: { maxCompletionTokens: 4 } } });
    expect([capped.finishReason, capped.usage.outputTokens]).toEqual(['length', 4]);

    const many = {
      store: false,
      metadata: { app: 'test' },
      serviceTier: 'auto',
      textVerbosity: 'low',
      promptCacheKey: 'k-1',
      safetyIdentifier: 'hashed-user',
      reasoningEffort: 'low',
    } as const;
    for (const provider of ['nebius', 'mistral', 'azure']) {
      const m = provider === 'azure' ? 'openai/gpt-4o-mini' : provider === 'mistral' ? 'mistral/small' : 'meta/llama-3.3-70b';
      const r = await generateText({ model: openai().chat(m), prompt: 'Hi', headers: pinned(provider), providerOptions: { openai: many } });
      expect(r.finishReason, provider).toBe('stop');
    }
    // Passed on where the provider takes them.
    expect(sent('azure')).toMatchObject({ store: false, metadata: { app: 'test' }, prompt_cache_key: 'k-1', safety_identifier: 'hashed-user' });
  });

  it('embed and embedMany (openai.embedding and textEmbeddingModel), with dimensions and user', async () => {
    for (const m of ['mistral/embed', 'baai/bge-m3']) {
      const one = await embed({ model: openai().embedding(m), value: 'Bonjour Paris' });
      expect(one.embedding, m).toHaveLength(1024);
      expect(one.usage.tokens).toBeGreaterThan(0);
      const many = await embedMany({ model: openai().textEmbeddingModel(m), values: ['Bonjour Paris', 'Guten Tag Berlin', 'Hola Madrid'] });
      expect(many.embeddings.map((e) => e.length)).toEqual([1024, 1024, 1024]);
      expect(many.embeddings[0]).toEqual(one.embedding);
      expect(many.embeddings[1]).not.toEqual(one.embedding);
      const sized = await embed({ model: openai().embedding(m), value: 'Bonjour Paris', providerOptions: { openai: { dimensions: 128, user: 'user-1' } } });
      expect(sized.embedding, m).toHaveLength(128);
      const sizedMany = await embedMany({ model: openai().embedding(m), values: ['a', 'b'], providerOptions: { openai: { dimensions: 256 } } });
      expect(sizedMany.embeddings.map((e) => e.length)).toEqual([256, 256]);
    }
  });

  it('experimental_transcribe: json by default; verbose_json when providerOptions.openai.responseFormat asks it, its language read as OpenAI names it', async () => {
    resetProviders(gw.sim);
    for (const [m, provider] of [
      ['openai/whisper-large-v3', 'scaleway'],
      ['mistral/voxtral-mini', 'mistral'],
    ] as const) {
      const model = openai().transcription(m);
      const headers = pinned(provider);
      const plain = await transcribe({ model, audio: wav(3), headers });
      expect(plain.text, m).toBe('Simulated transcript of 3.0 seconds of audio.');
      // @ai-sdk/openai 4 sends no response_format but for whisper-1: OpenAI's json, whose usage says the seconds.
      expect([plain.durationInSeconds, plain.segments, plain.language]).toEqual([3, [], undefined]);

      const verbose = await transcribe({ model, audio: wav(3), headers, providerOptions: { openai: { responseFormat: 'verbose_json' } } });
      expect(verbose.text).toBe(plain.text);
      expect(verbose.durationInSeconds).toBe(3);
      expect(verbose.segments.map((s) => [s.text.trim(), s.startSecond, s.endSecond])).toEqual([[plain.text, 0, 3]]);
      // OpenAI's verbose_json says 'english', which the SDK reads as 'en'; a code ('en') it does not read. Voxtral
      // detects no language where timings are asked (its `language: null`): 'unknown', which the SDK leaves out.
      const said = (verbose.responses[0] as { body?: { language?: string } }).body?.language;
      expect([said, verbose.language], m).toEqual(provider === 'mistral' ? ['unknown', undefined] : ['english', 'en']);
      if (provider === 'scaleway') {
        expect(sent('scaleway')).toMatchObject({ fields: { response_format: ['verbose_json'], temperature: ['0'], 'timestamp_granularities[]': ['segment'] } });
      }

      // Word timings through ai 7's own timestampGranularities, and through providerOptions.
      for (const asked of [
        { timestampGranularities: ['word'] as const, providerOptions: { openai: { responseFormat: 'verbose_json', language: 'de', prompt: 'A meeting.' } } },
        { providerOptions: { openai: { responseFormat: 'verbose_json', timestampGranularities: ['word'], language: 'de', prompt: 'A meeting.' } } },
      ] as const) {
        const words = await transcribe({ model, audio: wav(3), headers, ...asked, timestampGranularities: [...(asked.timestampGranularities ?? [])] });
        expect(words.language).toBe('de');
        expect(words.segments.length).toBeGreaterThan(0);
        expect(words.words?.length ?? 0, m).toBeGreaterThan(1);
      }
    }
  });

  it('experimental_transcribe with providerOptions.openai.languages and keywords: one language is the language; keywords are Voxtral’s context_bias and Whisper’s prompt', async () => {
    resetProviders(gw.sim);
    const keywords = ['Northwind', 'Quillara', 'Alder Creek Design'];
    for (const [m, provider] of [
      ['openai/whisper-large-v3', 'scaleway'],
      ['mistral/voxtral-mini', 'mistral'],
    ] as const) {
      const model = openai().transcription(m);
      const headers = pinned(provider);
      const one = await transcribe({
        model,
        audio: wav(3),
        headers,
        providerOptions: { openai: { responseFormat: 'verbose_json', languages: ['de'], keywords } },
      });
      expect(one.text, m).toBe('Simulated transcript of 3.0 seconds of audio.');
      expect(one.language, m).toBe('de');
      const fields = (sent(provider) as { fields: Record<string, string[]> }).fields;
      expect([fields['language'], fields['languages[]'], fields['keywords[]']], m).toEqual([['de'], undefined, undefined]);
      if (provider === 'mistral') expect(fields['context_bias']).toEqual(keywords);
      // Whisper's prompt is its way to spell names: the terms listed there.
      else expect(fields['prompt']).toEqual(['Northwind, Quillara, Alder Creek Design']);

      // Several languages: the model detects which (it takes one), and gives its timings where Voxtral is told none.
      const several = await transcribe({
        model,
        audio: wav(3),
        headers,
        providerOptions: { openai: { responseFormat: 'verbose_json', languages: ['de', 'en'], prompt: 'A meeting.', keywords: ['Quillara'] } },
      });
      expect(several.segments.length, m).toBe(1);
      expect(several.language, m).toBe(provider === 'mistral' ? undefined : 'en');
      const detected = (sent(provider) as { fields: Record<string, string[]> }).fields;
      expect(detected['language'], m).toBeUndefined();
      if (provider === 'mistral') expect([detected['context_bias'], detected['prompt']]).toEqual([['Quillara'], undefined]);
      else expect(detected['prompt']).toEqual(['A meeting. Quillara']);
    }

    // Refused alike wherever the model is served (failover takes the same forms): over Voxtral's 100 terms, a language
    // not among the languages, and OpenAI's fields the gateway does not offer, each naming its field.
    const v = base() === gw.baseA ? 'A' : 'B';
    for (const [options, param, said] of [
      [{ keywords: Array.from({ length: 101 }, (_, i) => `term${i}`) }, 'keywords', 'keywords'],
      [{ language: 'fr', languages: ['de', 'en'] }, 'language', "'language' is not one of 'languages'"],
      [{ languages: ['de', 'german'] }, 'languages.1', 'ISO-639-1'],
      [{ include: ['logprobs'] }, 'include', "'include' is not offered"],
      [{ chunkingStrategy: 'auto' }, 'chunking_strategy', "'chunking_strategy' is not offered"],
    ] as const) {
      for (const m of ['openai/whisper-large-v3', 'mistral/voxtral-mini']) {
        const err = (await transcribe({ model: openai().transcription(m), audio: wav(1), providerOptions: { openai: options } }).catch(
          (e: unknown) => e,
        )) as APICallError;
        expect([APICallError.isInstance(err), err.statusCode, err.isRetryable], `${param} ${m}`).toEqual([true, 400, false]);
        const error = JSON.parse(err.responseBody ?? '{}').error;
        expect([error.param, error.code], `${param} ${m}`).toEqual([param, v === 'A' ? 'validation_error' : 'invalid_request']);
        expect(err.message, `${param} ${m}`).toContain(said);
      }
    }
  });

  it('errors: a bad key, an unknown model and the Responses API as APICallError, in the variant’s envelope, not retried', async () => {
    const v = base() === gw.baseA ? 'A' : 'B';
    const badKey = await generateText({ model: openai('gw_live_nope').chat('mistral/small'), prompt: 'x' }).catch((e: unknown) => e);
    expect(APICallError.isInstance(badKey)).toBe(true);
    const keyError = badKey as APICallError;
    expect([keyError.statusCode, keyError.isRetryable]).toEqual([401, false]);
    expect(JSON.parse(keyError.responseBody ?? '{}').error).toMatchObject(
      v === 'A' ? { type: 'unauthorized', code: 'unauthorized' } : { type: 'authentication_error', code: 'invalid_api_key' },
    );
    expect(keyError.message).toBe(JSON.parse(keyError.responseBody ?? '{}').error.message);

    const unknown = (await generateText({ model: openai().chat('nope/model'), prompt: 'x' }).catch((e: unknown) => e)) as APICallError;
    expect([unknown.statusCode, unknown.isRetryable]).toEqual([v === 'A' ? 404 : 400, false]);
    expect(JSON.parse(unknown.responseBody ?? '{}').error).toMatchObject({ code: 'model_not_found', param: 'model' });

    // openai(model) is the Responses API, not served: its 404 names the route and the call to use instead.
    const responses = (await generateText({ model: openai()('mistral/small'), prompt: 'x' }).catch((e: unknown) => e)) as APICallError;
    expect([responses.statusCode, responses.isRetryable]).toEqual([404, false]);
    expect(responses.message).toContain('openai.chat(model)');

    for (const call of [
      () => embed({ model: openai('gw_live_nope').embedding('mistral/embed'), value: 'x' }),
      () => transcribe({ model: openai('gw_live_nope').transcription('openai/whisper-large-v3'), audio: wav(1) }),
    ]) {
      const err = (await call().catch((e: unknown) => e)) as APICallError;
      expect([APICallError.isInstance(err), err.statusCode]).toEqual([true, 401]);
    }
    // A stream refused before it starts: ai 7's error part is the same APICallError, in the variant's envelope.
    const streamed = streamText({ model: openai('gw_live_nope').chat('mistral/small'), prompt: 'x', maxRetries: 0, onError: () => {} });
    const parts: unknown[] = [];
    for await (const part of streamed.fullStream) if (part.type === 'error') parts.push(part.error);
    const [streamError] = parts as APICallError[];
    expect([parts.length, APICallError.isInstance(streamError), streamError?.statusCode, streamError?.isRetryable]).toEqual([1, true, 401, false]);
    expect(JSON.parse(streamError?.responseBody ?? '{}').error.code).toBe(v === 'A' ? 'unauthorized' : 'invalid_api_key');
  });
});

describe.each([
  ['A', () => gw.baseA, 'rate_limit_exceeded', 'rate_limit_exceeded', 'provider_down'],
  ['B', () => gw.baseB, 'rate_limit_error', 'rate_limited', 'upstream_unavailable'],
])('variant %s: 429 and retries through @ai-sdk/openai', (_v, base, type429, code429, code502) => {
  it('a key over its limit: APICallError 429, retryable, with Retry-After; a provider’s 429 is retried after its wait', async () => {
    const limited = (await gw.createKey({ rateLimitRpm: 1 })).key;
    const model = createOpenAI({ baseURL: base(), apiKey: limited }).chat('mistral/small');
    await generateText({ model, prompt: 'x', maxRetries: 0 });
    const err = (await generateText({ model, prompt: 'x', maxRetries: 0 }).catch((e: unknown) => e)) as APICallError;
    expect([APICallError.isInstance(err), err.statusCode, err.isRetryable]).toEqual([true, 429, true]);
    expect(JSON.parse(err.responseBody ?? '{}').error).toMatchObject({ message: 'Rate limit exceeded (1 RPM)', type: type429, code: code429 });
    expect(Number(err.responseHeaders?.['retry-after'])).toBeGreaterThan(0);
    expect(Number(err.responseHeaders?.['retry-after-ms'])).toBeGreaterThan(0);

    // The provider limits the gateway once: a 502 with its 1 s wait, which the SDK waits before its retry.
    resetProviders(gw.sim);
    const provider = _v === 'A' ? 'scaleway' : 'ovh';
    gw.sim.providers[provider]?.setFault({ kind: 'status', status: 429, times: 1, retryAfter: 1 });
    const seen: [number, string | null][] = [];
    const t0 = Date.now();
    const retried = await generateText({
      model: createOpenAI({
        baseURL: base(),
        apiKey: key,
        fetch: async (url, init) => {
          const res = await fetch(url, init);
          seen.push([res.status, res.headers.get('retry-after-ms')]);
          return res;
        },
      }).chat('mistral/small'),
      prompt: 'x',
      headers: pinned(provider),
    });
    expect(seen).toEqual([
      [502, '1000'],
      [200, null],
    ]);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(1000);
    expect(retried.text).toContain(provider);

    gw.sim.providers[provider]?.setFault({ kind: 'status', status: 429, times: 1, retryAfter: 1 });
    const failed = (await generateText({
      model: createOpenAI({ baseURL: base(), apiKey: key }).chat('mistral/small'),
      prompt: 'x',
      headers: pinned(provider),
      maxRetries: 0,
    }).catch((e: unknown) => e)) as APICallError;
    expect([failed.statusCode, failed.isRetryable, JSON.parse(failed.responseBody ?? '{}').error.code]).toEqual([502, true, code502]);
    resetProviders(gw.sim);
  }, 20_000);
});
