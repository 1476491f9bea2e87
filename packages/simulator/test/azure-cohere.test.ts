import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Simulator, startSimulator } from '../src/index.js';
import { json, must, stream, userMessages } from './helpers.js';

let sim: Simulator;
beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0, only: ['azure', 'cohere'] });
});
afterAll(() => sim.close());
const az = () => must(sim.providers['azure']);
const co = () => must(sim.providers['cohere']);
const dep = '/openai/deployments/gpt-4o-mini/chat/completions?api-version=2024-10-21';

describe('azure', () => {
  it('serves the deployment URL with content-filter results and the versioned model', async () => {
    const r = await json(az(), dep, { messages: userMessages('hello azure') });
    expect(r.status).toBe(200);
    expect(r.body.model).toBe('gpt-4o-mini-2024-07-18');
    expect(r.body.prompt_filter_results[0].content_filter_results.hate).toEqual({ filtered: false, severity: 'safe' });
    expect(r.body.choices[0].content_filter_results.violence.severity).toBe('safe');
    expect(r.headers.get('apim-request-id')).toBeTruthy();
  });

  it('streams a prompt-filter chunk first, annotation chunks, and a usage chunk', async () => {
    const s = await stream(az(), dep, { messages: userMessages('hello azure'), stream: true, stream_options: { include_usage: true } });
    expect(s.chunks[0]).toMatchObject({ choices: [], id: '', created: 0, model: '', object: '' });
    expect(must(s.chunks[0]).prompt_filter_results).toHaveLength(1);
    expect(s.chunks.some((c) => c.choices[0] && c.choices[0].delta === undefined && c.choices[0].content_filter_offsets)).toBe(true);
    expect(must(s.chunks.at(-1)).usage.total_tokens).toBeGreaterThan(0);
    expect(s.done).toBe(true);
  });

  it('requires api-version, a known deployment and the api-key header', async () => {
    const noVersion = await json(az(), '/openai/deployments/gpt-4o-mini/chat/completions', { messages: userMessages('x') });
    expect(noVersion.status).toBe(404);
    expect(noVersion.body.error.code).toBe('404');
    const noDep = await json(az(), '/openai/deployments/gpt-9/chat/completions?api-version=2024-10-21', { messages: userMessages('x') });
    expect(noDep.body.error.code).toBe('DeploymentNotFound');
    const bearer = await fetch(az().url + dep, {
      method: 'POST',
      headers: { authorization: `Bearer ${az().apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ messages: userMessages('x') }),
    });
    expect(bearer.status).toBe(401);
    expect(((await bearer.json()) as { error: { code: string } }).error.code).toBe('401');
    const old = await json(az(), '/openai/deployments/gpt-4o-mini/chat/completions?api-version=2024-06-01', {
      messages: userMessages('x'),
      stream: true,
      stream_options: { include_usage: true },
    });
    expect(old.status).toBe(400);
  });

  it('content_filter faults: 400 with innererror on the prompt, finish_reason on the completion', async () => {
    az().setFault({ kind: 'content_filter', on: 'prompt', times: 1 });
    const p = await json(az(), dep, { messages: userMessages('x') });
    expect(p.status).toBe(400);
    expect(p.body.error).toMatchObject({ code: 'content_filter', param: 'prompt', innererror: { code: 'ResponsibleAIPolicyViolation' } });
    az().setFault({ kind: 'content_filter', on: 'completion', times: 1 });
    const c = await json(az(), dep, { messages: userMessages('x') });
    expect(c.body.choices[0].finish_reason).toBe('content_filter');
  });

  it('lists deployable models by version on /openai/models, and deployments only on api-versions before 2023-05-15', async () => {
    const models = await json(az(), '/openai/models?api-version=2024-10-21');
    expect(models.body.data.map((d: { id: string }) => d.id)).toContain('gpt-4o-mini-2024-07-18');
    expect(models.body.data[0].capabilities.chat_completion).toBe(true);
    const gone = await json(az(), '/openai/deployments?api-version=2024-10-21');
    expect([gone.status, gone.body.error.code]).toEqual([404, '404']);
    const deps = await json(az(), '/openai/deployments?api-version=2022-12-01');
    expect(deps.body.data[0]).toMatchObject({ id: 'gpt-4o-mini', model: 'gpt-4o-mini-2024-07-18', object: 'deployment' });
  });
});

describe('cohere', () => {
  it('reranks in the v2 shape, ordered by score, cut to top_n', async () => {
    const r = await json(co(), '/v2/rerank', {
      model: 'rerank-v3.5',
      query: 'capital of France',
      documents: ['Berlin is big', 'Paris is the capital of France', 'France'],
      top_n: 2,
    });
    expect(r.status).toBe(200);
    expect(r.body.results).toHaveLength(2);
    expect(r.body.results[0].index).toBe(1);
    expect(r.body.results[0].relevance_score).toBeGreaterThan(r.body.results[1].relevance_score);
    expect(r.body.meta).toEqual({ api_version: { version: '2', is_experimental: false }, billed_units: { search_units: 1 } });
    expect(r.body.results[0]).not.toHaveProperty('document');
  });

  it('embeds by type and reports billed input tokens', async () => {
    const r = await json(co(), '/v2/embed', {
      model: 'embed-multilingual-v3.0',
      input_type: 'search_document',
      texts: ['hello world'],
      embedding_types: ['float', 'base64'],
    });
    expect(r.body.embeddings.float[0]).toHaveLength(1024);
    expect(Buffer.from(r.body.embeddings.base64[0], 'base64').length).toBe(4096);
    expect(r.body.meta.billed_units.input_tokens).toBe(3);
    expect(r.body.response_type).toBe('embeddings_by_type');
  });

  it('cuts a text longer than the model’s context as truncate says (END by default) and bills the tokens it kept', async () => {
    const long = `${'a'.repeat(2048)}${'b'.repeat(2048)}`; // 1,024 tokens, twice embed-multilingual-v3.0's 512
    const body = { model: 'embed-multilingual-v3.0', input_type: 'search_document', texts: [long, 'hello world'] };
    const end = await json(co(), '/v2/embed', body);
    expect([end.status, end.body.meta.billed_units.input_tokens]).toEqual([200, 512 + 3]);
    const start = await json(co(), '/v2/embed', { ...body, truncate: 'START' });
    expect([start.status, start.body.meta.billed_units.input_tokens]).toEqual([200, 512 + 3]);
    // END kept the start of the text and START its end: each embeds as that half alone does.
    const halves = await json(co(), '/v2/embed', { ...body, texts: ['a'.repeat(2048), 'b'.repeat(2048)] });
    expect(end.body.embeddings.float[0]).toEqual(halves.body.embeddings.float[0]);
    expect(start.body.embeddings.float[0]).toEqual(halves.body.embeddings.float[1]);
    const none = await json(co(), '/v2/embed', { ...body, truncate: 'NONE' });
    expect([none.status, none.body.message]).toEqual([
      400,
      "invalid request: text at index 0 has 1024 tokens, more than the model's 512; set truncate to END or START",
    ]);
    // embed-v4.0's context is 128k: the same text is embedded whole.
    const v4 = await json(co(), '/v2/embed', { ...body, model: 'embed-v4.0' });
    expect(v4.body.meta.billed_units.input_tokens).toBe(1024 + 3);
  });

  it('embeds through its compatibility API in OpenAI’s list shape, refusing dimensions and user', async () => {
    const path = '/compatibility/v1/embeddings';
    const long = 'a'.repeat(4096); // 1,024 tokens, twice embed-multilingual-v3.0's 512: cut, as Cohere's embed does by default
    const r = await json(co(), path, { model: 'embed-multilingual-v3.0', input: ['hello world', long] });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ object: 'list', model: 'embed-multilingual-v3.0', usage: { prompt_tokens: 3 + 512, total_tokens: 3 + 512 } });
    expect(r.body.data.map((d: { index: number; embedding: number[] }) => [d.index, d.embedding.length])).toEqual([
      [0, 1024],
      [1, 1024],
    ]);
    const b64 = await json(co(), path, { model: 'embed-multilingual-v3.0', input: 'hello world', encoding_format: 'base64' });
    expect(Buffer.from(b64.body.data[0].embedding, 'base64').length).toBe(4096);
    for (const field of ['dimensions', 'user']) {
      const refused = await json(co(), path, { model: 'embed-multilingual-v3.0', input: 'x', [field]: field === 'user' ? 'u' : 256 });
      expect([refused.status, refused.body.message]).toEqual([400, `invalid request: ${field} is not supported by the Compatibility API`]);
    }
  });

  it('answers errors as {id, message}', async () => {
    const empty = await json(co(), '/v2/rerank', { model: 'rerank-v3.5', query: 'q', documents: [] });
    expect(empty.status).toBe(400);
    expect(empty.body.message).toBe('invalid request: list of documents must not be empty');
    expect(typeof empty.body.id).toBe('string');
    const noType = await json(co(), '/v2/embed', { model: 'embed-multilingual-v3.0', texts: ['a'] });
    expect(noType.status).toBe(400);
    const bad = await json(co(), '/v2/rerank', { model: 'rerank-v3.5', query: 'q', documents: ['a'] }, { headers: { authorization: 'Bearer x' } });
    expect(bad.status).toBe(401);
    expect(bad.body.message).toBe('invalid api token');
  });

  it('lists models with endpoints, filterable by endpoint', async () => {
    const r = await json(co(), '/v1/models?endpoint=rerank');
    expect(r.body.models.map((x: { name: string }) => x.name)).toEqual(['rerank-v3.5']);
    expect(r.body.models[0]).toMatchObject({ endpoints: ['rerank'], context_length: 4096, finetuned: false });
  });
});
