import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { ModelConfig } from '@gw/schema';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';
import { startRawUpstream } from './helpers/raw-upstream.js';

/**
 * An OpenAI-compatible host whose answers are right but written oddly on the wire: JSON behind a UTF-8 byte
 * order mark (some Windows-hosted proxies add one), on a success and on an error alike; and a stream written
 * a few bytes at a time (multi-byte characters cut between writes) with CRLF line ends, comments, `retry:`,
 * `id:` and `event:` fields, `data:` without its space, Azure's first chunk with no choices (its prompt filter
 * results) and the usage in a last chunk with no choices.
 */
const TEXT = 'Bonjour é, 日本語 🎉';
const BOM = Buffer.from([0xef, 0xbb, 0xbf]);

function quirkyHost(req: IncomingMessage, res: ServerResponse, body: string) {
  const send = (status: number, json: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json; charset=utf-8' });
    res.end(Buffer.concat([BOM, Buffer.from(JSON.stringify(json))]));
  };
  if (req.method === 'GET')
    return send(200, {
      object: 'list',
      data: [
        { id: 'bom' },
        { id: 'bom-refusal' },
        { id: 'sse' },
        { id: 'sse-blank' },
        { id: 'sse-error-text' },
        { id: 'err200-refusal' },
        { id: 'err200-failure' },
        { id: 'emb-err200' },
        { id: 'no-index' },
        { id: 'tool-null-args' },
      ],
    });
  const model = (JSON.parse(body) as { model: string }).model;
  if (model === 'sse-error-text') {
    // A first word, then an `error` event whose data is text, not JSON, and the end.
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const first = { id: 's3', object: 'chat.completion.chunk', created: 1, model, choices: [{ index: 0, delta: { content: 'Half' }, finish_reason: null }] };
    res.end(`data: ${JSON.stringify(first)}\n\nevent: error\ndata: upstream timed out waiting for the model\n\n`);
    return;
  }
  if (model === 'sse' || model === 'sse-blank') {
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' });
    void writeInBits(res, model === 'sse' ? quirkySse() : blankEventsSse());
    return;
  }
  // An error object with a 200, in place of the completion (as OpenRouter reports a failure after its status went out).
  if (model === 'err200-refusal') {
    return send(200, { error: { message: 'prompt is 5000 tokens, over the 4096 of this model', type: 'invalid_request_error', param: 'messages', code: 400 } });
  }
  if (model === 'tool-null-args') {
    // A tool call opened with `arguments: null`, its arguments in the fragments that follow.
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const chunk = (delta: unknown, finish: string | null = null) =>
      `data: ${JSON.stringify({ id: 's5', object: 'chat.completion.chunk', created: 1, model, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    const call = (fn: unknown, extra: Record<string, unknown> = {}) => ({ tool_calls: [{ index: 0, ...extra, function: fn }] });
    res.end(
      chunk({ role: 'assistant', content: null, ...call({ name: 'get_weather', arguments: null }, { id: 'call1abcd', type: 'function' }) }) +
        chunk(call({ arguments: '{"city":' })) +
        chunk(call({ arguments: '"Paris"}' })) +
        chunk({}, 'tool_calls') +
        'data: [DONE]\n\n',
    );
    return;
  }
  if (model === 'no-index') {
    // Choices without their `index`, in a stream and in a whole answer.
    if (!(JSON.parse(body) as { stream?: boolean }).stream) {
      const message = { role: 'assistant', content: TEXT };
      return send(200, { id: 'c4', object: 'chat.completion', created: 1, model, choices: [{ message, finish_reason: 'stop' }] });
    }
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const chunk = (choice: unknown, usage?: unknown) =>
      `data: ${JSON.stringify({ id: 's4', object: 'chat.completion.chunk', created: 1, model, choices: choice ? [choice] : [], ...(usage ? { usage } : {}) })}\n\n`;
    res.end(
      chunk({ delta: { role: 'assistant', content: TEXT }, finish_reason: null }) +
        chunk({ delta: {}, finish_reason: 'stop' }) +
        chunk(null, { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 }) +
        'data: [DONE]\n\n',
    );
    return;
  }
  if (model === 'emb-err200') {
    return send(200, { object: 'error', message: "This model's maximum context length is 512 tokens", type: 'BadRequestError', param: null, code: 400 });
  }
  if (model === 'err200-failure') return send(200, { error: { message: 'generation failed on the worker', type: 'server_error', code: 500 } });
  if (model === 'bom-refusal') return send(400, { error: { message: 'messages[0].content is too long for this model', type: 'invalid_request_error' } });
  send(200, {
    id: 'c1',
    object: 'chat.completion',
    created: 1,
    model,
    choices: [{ index: 0, message: { role: 'assistant', content: TEXT }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 },
  });
}

function quirkySse(): Buffer {
  const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) => ({
    id: 's1',
    object: 'chat.completion.chunk',
    created: 1,
    model: 'sse',
    choices,
    ...extra,
  });
  const events: unknown[] = [
    { id: '', object: '', created: 0, model: '', choices: [], prompt_filter_results: [{ prompt_index: 0, content_filter_results: {} }] },
    chunk([{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }]),
    ...[...TEXT].map((c) => chunk([{ index: 0, delta: { content: c }, finish_reason: null }])),
    chunk([{ index: 0, delta: {}, finish_reason: 'stop' }]),
    chunk([], { usage: { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 } }),
  ];
  let text = ': connected\r\nretry: 3000\r\n\r\n';
  events.forEach((event, at) => {
    text += `: event ${at}\r\nid: ${at}\r\nevent: message\r\ndata:${JSON.stringify(event)}\r\n\r\n`;
  });
  return Buffer.from(`${text}data:[DONE]\r\n\r\n`);
}

/** A stream with events that carry no data (`data:` alone, `data: ` and a blank line, as keep-alives) around its chunks. */
function blankEventsSse(): Buffer {
  const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) =>
    `data: ${JSON.stringify({ id: 's2', object: 'chat.completion.chunk', created: 1, model: 'sse-blank', choices, ...extra })}\n\n`;
  let text = 'data:\n\n';
  text += chunk([{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }]);
  text += 'data: \r\n\r\n';
  for (const c of [...TEXT]) text += `${chunk([{ index: 0, delta: { content: c }, finish_reason: null }])}event: ping\ndata:\n\n`;
  text += chunk([{ index: 0, delta: {}, finish_reason: 'stop' }]);
  text += chunk([], { usage: { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 } });
  return Buffer.from(`${text}data:\n\ndata: [DONE]\n\n`);
}

/** Writes `bytes` 1 to 7 at a time (a fixed sequence of sizes), each write on a turn of its own so it leaves alone. */
async function writeInBits(res: ServerResponse, bytes: Buffer): Promise<void> {
  for (let at = 0, step = 0; at < bytes.length; step++) {
    const size = 1 + ((step * 5 + 3) % 7);
    res.write(bytes.subarray(at, at + size));
    at += size;
    await new Promise((r) => setImmediate(r));
  }
  res.end();
}

const PRICE = { prompt_per_1m: 1000, completion_per_1m: 2000, currency: 'EUR' };

function model(id: string): ModelConfig {
  return {
    id: `quirk/${id}`,
    kind: 'chat',
    owned_by: 'test',
    context_window: 8000,
    capabilities: ['streaming'],
    offers: [{ provider: 'host', upstreamModel: id, pricing: PRICE }],
  };
}

let host: Server;
let gw: TestGateway;

beforeAll(async () => {
  const started = await startRawUpstream(quirkyHost);
  host = started.server;
  const baseUrl = started.baseUrl;
  gw = await startGateway({
    catalogue: () => ({
      providers: [
        { id: 'host', type: 'openai', baseUrl, region: 'fr-par', apiKey: '' },
        { id: 'mhost', type: 'mistral', baseUrl, region: 'fr-par', apiKey: 'mistral-key' },
      ],
      models: [
        model('bom'),
        model('bom-refusal'),
        model('sse'),
        model('sse-blank'),
        model('sse-error-text'),
        model('err200-refusal'),
        model('no-index'),
        model('tool-null-args'),
        { ...model('tool-null-args'), id: 'quirk/mistral-tool-null-args', offers: [{ provider: 'mhost', upstreamModel: 'tool-null-args', pricing: PRICE }] },
        { id: 'quirk/emb-err200', kind: 'embedding', owned_by: 'test', offers: [{ provider: 'host', upstreamModel: 'emb-err200', pricing: PRICE }] },
        {
          ...model('err200-failure'),
          offers: [
            { provider: 'host', upstreamModel: 'err200-failure', pricing: PRICE },
            { provider: 'mhost', upstreamModel: 'bom', pricing: PRICE },
          ],
        },
        { ...model('sse-error-text'), id: 'quirk/mistral-error-text', offers: [{ provider: 'mhost', upstreamModel: 'sse-error-text', pricing: PRICE }] },
      ],
    }),
  });
});
afterAll(async () => {
  await gw?.close();
  await gw?.sim.close();
  host?.close();
});

describe('a JSON answer behind a UTF-8 byte order mark', () => {
  it('is read as the JSON it is: the answer reaches the client whole and is billed at the provider’s count', async () => {
    const { id, key } = await gw.createKey();
    const client = new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 0 });
    const answer = await client.chat.completions.create({ model: 'quirk/bom', messages: [{ role: 'user', content: 'hi' }] });
    expect(answer.choices[0]?.message.content).toBe(TEXT);
    expect(answer.usage).toMatchObject({ prompt_tokens: 11, completion_tokens: 7 });
    // 11 prompt tokens at 1000/M and 7 completion tokens at 2000/M.
    await eventually(async () => {
      expect((await gw.admin<{ spent: number }>('GET', `/keys/${id}`)).body.spent).toBeCloseTo(0.025, 9);
    });
  });

  it('passes a refusal’s own message on, as without the mark', async () => {
    const { key } = await gw.createKey();
    const res = await fetch(`${gw.baseA}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'quirk/bom-refusal', messages: [{ role: 'user', content: 'hi' }] }),
    });
    const body = (await res.json()) as { error: { message: string } };
    expect(res.status).toBe(400);
    expect(body.error.message).toContain('messages[0].content is too long for this model');
  });
});

/** A stream of `model` read through the OpenAI SDK with its usage asked for: its text and the last usage it carried. */
async function sdkStream(key: string, model: string): Promise<{ text: string; usage: unknown }> {
  const client = new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 0 });
  const stream = await client.chat.completions.create({
    model,
    messages: [{ role: 'user', content: 'hi' }],
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let usage: unknown = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? '';
    usage = chunk.usage ?? usage;
  }
  return { text, usage };
}

describe('a stream written oddly on the wire', () => {
  it('reaches the OpenAI SDK and a raw reader with the same text, the usage the provider counted, and is billed at it', async () => {
    const { id, key } = await gw.createKey();
    const { text, usage } = await sdkStream(key, 'quirk/sse');
    expect(text).toBe(TEXT);
    expect(usage).toMatchObject({ prompt_tokens: 11, completion_tokens: 7 });

    const res = await fetch(`${gw.baseA}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'quirk/sse', messages: [{ role: 'user', content: 'hi' }], stream: true }),
    });
    const raw = await res.text();
    const chunks = raw
      .split('\n')
      .filter((line) => line.startsWith('data: {'))
      .map((line) => JSON.parse(line.slice(6)) as { choices: { delta: { content?: string } }[]; usage?: unknown });
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe(TEXT);
    // Usage not asked for: no usage chunk, and the stream ends at [DONE].
    expect(chunks.some((c) => c.usage)).toBe(false);
    expect(raw.trimEnd().endsWith('data: [DONE]')).toBe(true);
    await eventually(async () => {
      expect((await gw.admin<{ spent: number }>('GET', `/keys/${id}`)).body.spent).toBeCloseTo(0.05, 9);
    });
  });
});

describe('a stream with events that carry no data', () => {
  it('is read as if they were comments: the OpenAI SDK gets the whole text and the provider’s usage, billed at it', async () => {
    const { id, key } = await gw.createKey();
    const { text, usage } = await sdkStream(key, 'quirk/sse-blank');
    expect(text).toBe(TEXT);
    expect(usage).toMatchObject({ prompt_tokens: 11, completion_tokens: 7 });
    await eventually(async () => {
      expect((await gw.admin<{ spent: number }>('GET', `/keys/${id}`)).body.spent).toBeCloseTo(0.025, 9);
    });
  });
});

describe('an error event whose data is text, not JSON', () => {
  it('reaches the OpenAI SDK in the provider’s words, after the text relayed before it (OpenAI-compatible and Mistral)', async () => {
    const { key } = await gw.createKey();
    const client = new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 0 });
    for (const model of ['quirk/sse-error-text', 'quirk/mistral-error-text']) {
      const stream = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }], stream: true });
      let text = '';
      const failed = await (async () => {
        for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
      })().catch((err: Error) => err);
      expect(text).toBe('Half');
      expect(failed).toBeInstanceOf(Error);
      expect((failed as Error).message).toContain('sent an error in its stream: upstream timed out waiting for the model');
    }
  });
});

describe('an error object answered with a 200 in place of a completion', () => {
  it('is the client’s 400 in the provider’s words when it names a refusal of the request, unbilled (in both variants)', async () => {
    const { id, key } = await gw.createKey();
    for (const [base, code] of [
      [gw.baseA, 'validation_error'],
      [gw.baseB, 'invalid_request'],
    ] as const) {
      const res = await fetch(`${base}/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'quirk/err200-refusal', messages: [{ role: 'user', content: 'hi' }] }),
      });
      expect(res.status).toBe(400);
      const body = (await res.json()) as { error: { message: string; code: string; param: string | null } };
      expect(body.error.code).toBe(code);
      expect(body.error.message).toContain('prompt is 5000 tokens, over the 4096 of this model');
      expect(body.error.param).toBe('messages');
    }
    await new Promise((r) => setTimeout(r, 300));
    expect((await gw.admin<{ spent: number }>('GET', `/keys/${id}`)).body.spent).toBe(0);
  });

  it('is the provider failing otherwise: the next offer answers', async () => {
    const { key } = await gw.createKey();
    const client = new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 0 });
    const { data, response } = await client.chat.completions
      .create({ model: 'quirk/err200-failure', messages: [{ role: 'user', content: 'hi' }] })
      .withResponse();
    expect(data.choices[0]?.message.content).toBe(TEXT);
    expect(response.headers.get('x-gateway-provider')).toBe('mhost');
  });

  it('to an embeddings call, is the client’s 400 in the provider’s words when it names a refusal', async () => {
    const { key } = await gw.createKey();
    const res = await fetch(`${gw.baseA}/embeddings`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'quirk/emb-err200', input: 'a long text' }),
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { message: string; code: string } };
    expect(body.error.code).toBe('validation_error');
    expect(body.error.message).toContain("This model's maximum context length is 512 tokens");
  });
});

describe('choices without their index', () => {
  it('reach the OpenAI SDK’s stream helper and a whole answer with the index of their place', async () => {
    const { key } = await gw.createKey();
    const client = new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 0 });
    const stream = client.chat.completions.stream({ model: 'quirk/no-index', messages: [{ role: 'user', content: 'hi' }] });
    const final = await stream.finalChatCompletion();
    expect(final.choices[0]?.message.content).toBe(TEXT);
    expect(final.choices[0]?.finish_reason).toBe('stop');
    const whole = await client.chat.completions.create({ model: 'quirk/no-index', messages: [{ role: 'user', content: 'hi' }] });
    expect(whole.choices[0]?.index).toBe(0);
  });
});

describe('a streamed tool call opened with arguments: null', () => {
  it('reaches the OpenAI SDK with the arguments its fragments make, valid JSON (OpenAI-compatible and Mistral)', async () => {
    const { key } = await gw.createKey();
    const client = new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 0 });
    for (const model of ['quirk/tool-null-args', 'quirk/mistral-tool-null-args']) {
      const stream = client.chat.completions.stream({
        model,
        messages: [{ role: 'user', content: 'weather?' }],
        tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }],
      });
      const final = await stream.finalChatCompletion();
      const call = final.choices[0]?.message.tool_calls?.[0];
      expect(call?.type === 'function' ? call.function.arguments : null).toBe('{"city":"Paris"}');
    }
  });
});
