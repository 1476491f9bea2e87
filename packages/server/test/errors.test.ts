import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { wav } from './helpers/audio.js';
import { ADMIN_TOKEN, startGateway, type TestGateway } from './helpers/gateway.js';
import { exchange } from './helpers/raw-http.js';

let gw: TestGateway;
let key: string;

beforeAll(async () => {
  gw = await startGateway({ env: { GW_BODY_LIMIT_BYTES: '65536' } });
  // Every authenticated request but the model list counts, refusals included: this file makes many.
  key = (await gw.createKey({ rateLimitRpm: 10_000 })).key;
});
afterAll(() => gw?.close());

interface Envelope {
  error: { message: string; type: string; code: string; param: string | null };
}

async function post(base: string, path: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${base}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, body: (await res.json()) as Envelope };
}

const upstreamCalls = () => Object.values(gw.sim.providers).reduce((sum, p) => sum + (p?.stats().total ?? 0), 0);
const chat = (extra: Record<string, unknown> = {}) => ({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'hi' }], ...extra });

describe('errors in each variant’s envelope', () => {
  it('a bad body is 400 validation_error (A) / invalid_request (B), naming the field', async () => {
    const ra = await post(gw.baseA, '/chat/completions', chat({ temperature: 3 }));
    expect(ra.status).toBe(400);
    expect(ra.body.error).toMatchObject({ code: 'validation_error', type: 'validation_error', param: 'temperature' });
    expect(ra.body.error.message).toContain("'temperature'");
    const rb = await post(gw.baseB, '/chat/completions', chat({ temperature: 3 }));
    expect(rb.status).toBe(400);
    expect(rb.body.error).toMatchObject({ code: 'invalid_request', type: 'invalid_request_error', param: 'temperature' });
    const missing = await post(gw.baseA, '/chat/completions', { model: 'meta/llama-3.3-70b' });
    expect(missing.body.error.message).toContain("'messages' is required");
    const role = await post(gw.baseA, '/chat/completions', chat({ messages: [{ role: 'robot', content: 'x' }] }));
    expect(role.body.error.param).toBe('messages.0.role');
    const stringNumber = await post(gw.baseA, '/chat/completions', chat({ max_tokens: '12' }));
    expect(stringNumber.status).toBe(400);
    // A value that fits none of a union's shapes is named by the shape it came closest to.
    const content = await post(gw.baseA, '/chat/completions', chat({ messages: [{ role: 'user', content: 5 }] }));
    expect([content.body.error.param, content.body.error.message]).toEqual([
      'messages.0.content',
      "Invalid body: 'messages.0.content' must be string or array.",
    ]);
    // What OpenAI refuses and a provider might ignore is refused here, whatever the route.
    const tool = { type: 'function', function: { name: 'weather', parameters: { type: 'object' } } };
    for (const [extra, param] of [
      [{ stream_options: { include_usage: true } }, 'stream_options'],
      [{ tool_choice: 'required' }, 'tool_choice'],
      [{ tools: [tool], tool_choice: { type: 'function', function: { name: 'time' } } }, 'tool_choice.function.name'],
      [{ n: 0 }, 'n'],
      [{ n: 200 }, 'n'],
    ] as const) {
      const r = await post(gw.baseB, '/chat/completions', chat(extra));
      expect([param, r.status, r.body.error.code, r.body.error.param]).toEqual([param, 400, 'invalid_request', param]);
    }
    expect((await post(gw.baseA, '/chat/completions', chat({ tools: [tool], tool_choice: { type: 'function', function: { name: 'weather' } } }))).status).toBe(
      200,
    );
    const emptyInput = await post(gw.baseB, '/embeddings', { model: 'mistral/embed', input: [] });
    expect([emptyInput.status, emptyInput.body.error.param]).toEqual([400, 'input']);
    expect(emptyInput.body.error.message).toBe("Invalid body: 'input' must not be empty.");
    // Sizes are said in words, not in Ajv's ('must NOT have fewer than 1 characters').
    for (const [path, body, message] of [
      ['/embeddings', { model: 'mistral/embed', input: '' }, "Invalid body: 'input' must not be empty."],
      ['/embeddings', { model: 'mistral/embed', input: ['a', ''] }, "Invalid body: 'input.1' must not be empty."],
      ['/embeddings', { model: 'x'.repeat(201), input: 'a' }, "Invalid body: 'model' must be at most 200 characters long."],
      ['/embeddings', { model: 'mistral/embed', input: Array(2049).fill('a') }, "Invalid body: 'input' must have at most 2048 items."],
      ['/chat/completions', chat({ messages: [] }), "Invalid body: 'messages' must not be empty."],
      ['/rerank', { model: 'cohere/rerank-v3.5', query: '', documents: ['a'] }, "Invalid body: 'query' must not be empty."],
    ] as const) {
      const r = await post(gw.baseB, path, body);
      expect([path, r.status, r.body.error.code, r.body.error.message]).toEqual([path, 400, 'invalid_request', message]);
    }
    const numberInput = await post(gw.baseA, '/embeddings', { model: 'mistral/embed', input: ['a', 5] });
    expect([numberInput.body.error.param, numberInput.body.error.message]).toEqual(['input.1', "Invalid body: 'input.1' must be string."]);
    // Every message but an assistant's (which may carry only tool calls) says something.
    for (const role of ['user', 'system', 'tool']) {
      const silent = await post(gw.baseA, '/chat/completions', chat({ messages: [{ role: 'user', content: 'hi' }, { role }] }));
      expect([role, silent.status, silent.body.error.param]).toEqual([role, 400, 'messages.1.content']);
      const empty = await post(
        gw.baseB,
        '/chat/completions',
        chat({
          messages: [
            { role: 'user', content: 'hi' },
            { role, content: null },
          ],
        }),
      );
      expect([role, empty.status, empty.body.error.param]).toEqual([role, 400, 'messages.1.content']);
    }
    // The rule is in the published schema too, where a client's validator finds it.
    const doc = (await (await fetch(`${gw.url}/openapi.json`)).json()) as { components?: unknown; paths: Record<string, unknown> };
    expect(JSON.stringify(doc)).toContain('"then":{"required":["content"]');
    // An assistant's message says something or calls a tool (Mistral refuses it otherwise, other providers might not).
    for (const silent of [{ role: 'assistant' }, { role: 'assistant', content: null, tool_calls: [] }]) {
      const r = await post(gw.baseA, '/chat/completions', chat({ messages: [{ role: 'user', content: 'hi' }, silent, { role: 'user', content: 'hi' }] }));
      expect([r.status, r.body.error.param]).toEqual([400, 'messages.1.content']);
    }
    const legacy = await post(
      gw.baseA,
      '/chat/completions',
      chat({
        messages: [
          { role: 'user', content: 'hi' },
          { role: 'assistant', content: null, function_call: { name: 'f', arguments: '{}' } },
          { role: 'user', content: 'hi' },
        ],
      }),
    );
    expect(legacy.status).toBe(200);
    const toolCall = { id: 'call_1', type: 'function', function: { name: 'f', arguments: '{}' } };
    const assistant = await post(
      gw.baseA,
      '/chat/completions',
      chat({
        messages: [
          { role: 'user', content: 'hi' },
          { role: 'assistant', tool_calls: [toolCall] },
          { role: 'tool', tool_call_id: 'call_1', content: 'done' },
        ],
      }),
    );
    expect(assistant.status).toBe(200);
  });

  it('a tagged union names the field of the shape its tag chose: a json_schema response_format with a bad schema part', async () => {
    const format = (json_schema?: Record<string, unknown>) => chat({ response_format: { type: 'json_schema', ...(json_schema ? { json_schema } : {}) } });
    const strict = await post(gw.baseA, '/chat/completions', format({ name: 'x', strict: 'yes' }));
    expect([strict.status, strict.body.error.param]).toEqual([400, 'response_format.json_schema.strict']);
    const nameless = await post(gw.baseA, '/chat/completions', format({ schema: {} }));
    expect(nameless.body.error.param).toBe('response_format.json_schema.name');
    const missing = await post(gw.baseB, '/chat/completions', format());
    expect([missing.body.error.param, missing.body.error.message]).toEqual([
      'response_format.json_schema',
      "Invalid body: 'response_format.json_schema' is required.",
    ]);
    // A tag that names no shape is the tag's fault.
    const unknown = await post(gw.baseA, '/chat/completions', chat({ response_format: { type: 'yaml' } }));
    expect(unknown.body.error.param).toBe('response_format.type');
  });

  it('a body that is not JSON is a 400 in the envelope, saying where it breaks', async () => {
    const r = await post(gw.baseB, '/chat/completions', '{"model": ');
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('invalid_request');
    // A trailing comma, the usual slip: JSON's own message with its position, and no word of prototype keys.
    const comma = await post(gw.baseA, '/chat/completions', '{"model":"mistral/small","messages":[],}');
    expect(comma.body.error.message).toMatch(/^The request body is not valid JSON: .*position 39/);
    expect(comma.body.error.message).not.toContain('__proto__');
  });

  it("valid JSON naming '__proto__' is refused with a message that says so, not taken for broken JSON", async () => {
    const schema = { type: 'object', properties: { __proto__: { type: 'string' } } };
    const text = `{"model":"mistral/small","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":${JSON.stringify(schema).replace('"properties":{}', '"properties":{"__proto__":{"type":"string"}}')}}}}`;
    expect(() => JSON.parse(text)).not.toThrow();
    const r = await post(gw.baseA, '/chat/completions', text);
    expect([r.status, r.body.error.code]).toEqual([400, 'validation_error']);
    expect(r.body.error.message).toContain("'__proto__'");
    expect(r.body.error.message).not.toContain('not valid JSON');
  });

  it('a body that is not application/json is 415 unsupported_media_type; a JSON body where a form is expected too', async () => {
    for (const type of ['text/plain', 'text/plain;charset=UTF-8', 'application/xml', 'application/x-www-form-urlencoded']) {
      for (const base of [gw.baseA, gw.baseB]) {
        const r = await post(base, '/chat/completions', JSON.stringify(chat()), { 'content-type': type });
        expect([type, r.status, r.body.error.code]).toEqual([type, 415, 'unsupported_media_type']);
      }
    }
    // fetch labels a string body text/plain when no Content-Type is given.
    const unlabelled = await fetch(`${gw.baseA}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}` },
      body: JSON.stringify(chat()),
    });
    expect(unlabelled.status).toBe(415);
    const form = await post(gw.baseB, '/audio/transcriptions', { model: 'mistral/voxtral-mini', file: 'a.mp3' });
    expect([form.status, form.body.error.code]).toEqual([415, 'unsupported_media_type']);
    expect(form.body.error.message).toContain('multipart/form-data');
  });

  it('JSON in a charset other than UTF-8 is 415 naming it; UTF-8 however spelt is read', async () => {
    for (const charset of ['iso-8859-1', 'UTF-16', '"latin1"']) {
      const r = await post(gw.baseA, '/chat/completions', JSON.stringify(chat()), { 'content-type': `application/json; charset=${charset}` });
      expect([r.status, r.body.error.code]).toEqual([415, 'unsupported_media_type']);
      expect(r.body.error.message).toBe(`Unsupported charset '${charset.replaceAll('"', '').toLowerCase()}': send the JSON body in UTF-8.`);
    }
    for (const charset of ['utf-8', 'UTF-8', 'utf8', '"utf-8"']) {
      const r = await post(gw.baseB, '/chat/completions', JSON.stringify(chat()), { 'content-type': `application/json;charset=${charset}` });
      expect([charset, r.status]).toEqual([charset, 200]);
    }
  });

  it('a body that is not UTF-8 (Latin-1 sent without its charset) is refused, not passed on with its text replaced', async () => {
    const json = JSON.stringify(chat({ messages: [{ role: 'user', content: 'Où est la gare ?' }] }));
    for (const [base, code] of [
      [gw.baseA, 'validation_error'],
      [gw.baseB, 'invalid_request'],
    ] as const) {
      const before = upstreamCalls();
      const r = await fetch(`${base}/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: Buffer.from(json, 'latin1'),
      });
      const body = (await r.json()) as { error: { code: string; message: string } };
      expect([r.status, body.error.code]).toEqual([400, code]);
      expect(body.error.message).toContain('not valid UTF-8');
      expect(upstreamCalls()).toBe(before);
      // The same text in UTF-8 is answered.
      const ok = await fetch(`${base}/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: Buffer.from(json, 'utf8'),
      });
      expect(ok.status).toBe(200);
    }
  });

  it('a gzipped body is 415 naming Content-Encoding, not a JSON syntax error', async () => {
    const { gzipSync } = await import('node:zlib');
    for (const base of [gw.baseA, gw.baseB]) {
      const r = await fetch(`${base}/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'content-encoding': 'gzip' },
        body: gzipSync(JSON.stringify(chat())),
      });
      const body = (await r.json()) as { error: { code: string; message: string } };
      expect([r.status, body.error.code]).toEqual([415, 'unsupported_media_type']);
      expect(body.error.message).toContain("Content-Encoding 'gzip'");
    }
  });

  it('every body encoding the gateway does not decode is 415 in the variant’s envelope: Transfer-Encoding codings, br, deflate, and a plain body declared gzip', async () => {
    const { brotliCompressSync, deflateSync, gzipSync } = await import('node:zlib');
    const port = Number(new URL(gw.url).port);
    const json = JSON.stringify(chat());
    // Over a raw socket: fetch will not send a Transfer-Encoding of its own. The chunks are taken off by Node, the gzip was not.
    const chunked = (path: string, te: string, type: string, body: Buffer) =>
      exchange(
        port,
        Buffer.concat([
          Buffer.from(
            `POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: ${type}\r\nTransfer-Encoding: ${te}\r\nConnection: close\r\n\r\n${body.length.toString(16)}\r\n`,
          ),
          body,
          Buffer.from('\r\n0\r\n\r\n'),
        ]),
      );
    for (const [prefix, code, type] of [
      ['/v1', 'unsupported_media_type', 'unsupported_media_type'],
      ['/alt/v1', 'unsupported_media_type', 'invalid_request_error'],
    ] as const) {
      for (const [te, body] of [
        ['gzip, chunked', gzipSync(json)],
        ['deflate, chunked', deflateSync(json)],
        ['br, chunked', brotliCompressSync(json)],
      ] as const) {
        const answer = await chunked(`${prefix}/chat/completions`, te, 'application/json', body);
        expect(answer).toMatch(/^HTTP\/1\.1 415 /);
        const error = (JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as Envelope).error;
        expect([error.code, error.type, error.message]).toEqual([code, type, expect.stringContaining(`Transfer-Encoding '${te.split(',')[0]}'`)]);
      }
      // The upload route too, before it spools anything.
      const form = await chunked(`${prefix}/audio/transcriptions`, 'gzip, chunked', 'multipart/form-data; boundary=x', gzipSync('--x--'));
      expect(form).toMatch(/^HTTP\/1\.1 415 /);
      expect(form).toContain("Transfer-Encoding 'gzip'");
    }
    // chunked alone is a plain body.
    const plain = await chunked('/v1/chat/completions', 'chunked', 'application/json', Buffer.from(json));
    expect(plain).toMatch(/^HTTP\/1\.1 200 /);
    for (const base of [gw.baseA, gw.baseB]) {
      for (const [coding, body] of [
        ['br', brotliCompressSync(json)],
        ['deflate', deflateSync(json)],
        // Declared gzip but sent plain: refused as declared, not taken as it happens to parse.
        ['gzip', Buffer.from(json)],
      ] as const) {
        const r = await fetch(`${base}/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'content-encoding': coding },
          body,
        });
        const error = ((await r.json()) as Envelope).error;
        expect([coding, r.status, error.code, error.message]).toEqual([
          coding,
          415,
          'unsupported_media_type',
          expect.stringContaining(`Content-Encoding '${coding}'`),
        ]);
      }
    }
    const identity = await post(gw.baseA, '/chat/completions', chat(), { 'content-encoding': 'identity' });
    expect(identity.status).toBe(200);
  });

  it('a path without the base address’s /v1 is told where the route is', async () => {
    for (const [path, meant] of [
      ['/chat/completions', '/v1/chat/completions'],
      ['/alt/chat/completions', '/alt/v1/chat/completions'],
    ]) {
      const r = await post(gw.url, path, chat());
      expect([path, r.status, r.body.error.message]).toEqual([path, 404, expect.stringContaining(`Did you mean ${meant}?`)]);
    }
    expect((await post(gw.url, '/nothing/here', chat())).body.error.message).toBe('No route POST /nothing/here.');
  });

  it('a path off only by a doubled or trailing slash or its letter case is a 404 that names the route meant', async () => {
    for (const [base, path, meant] of [
      [gw.url, '/v1/chat/completions/', '/v1/chat/completions'],
      [gw.url, '/v1//chat/completions', '/v1/chat/completions'],
      [gw.url, '//v1/embeddings', '/v1/embeddings'],
      [gw.url, '/alt/v1/chat/completions/', '/alt/v1/chat/completions'],
      [gw.url, '/V1/Chat/Completions', '/v1/chat/completions'],
    ]) {
      const r = await post(base as string, path as string, chat());
      expect([path, r.status, r.body.error.code, r.body.error.message]).toEqual([path, 404, 'not_found', expect.stringContaining(`Did you mean ${meant}?`)]);
    }
    expect((await post(gw.url, '/v1/chat/complete', chat())).body.error.message).toBe('No route POST /v1/chat/complete.');
  });

  it("a variant B path off in letter case or doubled slashes is answered in B's envelope, as the route it names is", async () => {
    for (const [path, meant] of [
      ['//alt/v1/chat/completions', '/alt/v1/chat/completions'],
      ['/ALT/V1/chat/completions', '/alt/v1/chat/completions'],
      ['/Alt/v1/embeddings', '/alt/v1/embeddings'],
    ]) {
      const r = await post(gw.url, path as string, chat());
      expect([path, r.status, r.body.error]).toEqual([
        path,
        404,
        { type: 'invalid_request_error', code: 'not_found', param: null, message: expect.stringContaining(`Did you mean ${meant}?`) },
      ]);
    }
    // A path that only begins with the letters stays A's.
    expect((await post(gw.url, '/alternative/v1/chat/completions', chat())).body.error.type).toBe('not_found');
  });

  it('a model path off by a trailing or doubled slash is the 404 naming the route meant, not a 400 about an empty id', async () => {
    for (const [method, path, meant] of [
      ['GET', '/v1/models/', '/v1/models'],
      ['GET', '/alt/v1/models/', '/alt/v1/models'],
      ['HEAD', '/v1/models/', '/v1/models'],
      ['GET', '/v1/models//', '/v1/models'],
      ['GET', '/v1/models//small', '/v1/models/small'],
      ['GET', '/alt/v1/models/mistral/', '/alt/v1/models/mistral'],
      // No route takes DELETE there: the path is the slip, not the method (then a 405 at the path meant).
      ['DELETE', '/v1/models/', '/v1/models'],
    ]) {
      const res = await fetch(`${gw.url}${path}`, { method, headers: { authorization: `Bearer ${key}` } });
      expect([method, path, res.status, res.headers.get('allow')]).toEqual([method, path, 404, null]);
      if (method === 'HEAD') continue;
      const { error } = (await res.json()) as Envelope;
      expect([path, error.code, error.param, error.message]).toEqual([
        path,
        'not_found',
        null,
        `No route ${method} ${path}. Did you mean ${meant}? Paths are matched as written: in lower case, without doubled or trailing slashes.`,
      ]);
    }
    const model = await fetch(`${gw.baseA}/models/mistral/small`, { headers: { authorization: `Bearer ${key}` } });
    expect(model.status).toBe(200);
  });

  it('variant B does not name the kind of an embedding model outside its beta, which its model list hides', async () => {
    const hidden = 'baai/bge-multilingual-gemma2';
    const listed = (await (await fetch(`${gw.baseB}/models`, { headers: { authorization: `Bearer ${key}` } })).json()) as { data: { id: string }[] };
    expect(listed.data.map((m) => m.id)).not.toContain(hidden);
    const rb = await post(gw.baseB, '/chat/completions', chat({ model: hidden }));
    expect([rb.status, rb.body.error.code, rb.body.error.message]).toEqual([
      400,
      'model_not_found',
      expect.stringContaining(`The model '${hidden}' does not exist.`),
    ]);
    // A model that does not exist for the caller is not counted against its rate limit (SPEC: Limits).
    expect(rb.headers.get('x-ratelimit-remaining')).toBeNull();
    // Variant A lists it: a chat request is told what kind of model it is.
    const ra = await post(gw.baseA, '/chat/completions', chat({ model: hidden }));
    expect([ra.status, ra.body.error.message]).toEqual([400, expect.stringContaining('is an embedding model, not a chat model')]);
  });

  it("OpenAI's Responses API and legacy completions are told which route takes the request instead", async () => {
    for (const [base, chatRoute] of [
      [gw.baseA, 'POST /v1/chat/completions'],
      [gw.baseB, 'POST /alt/v1/chat/completions'],
    ] as const) {
      const responses = await post(base, '/responses', { model: 'mistral/small', input: 'Bonjour' });
      expect([responses.status, responses.body.error.message]).toEqual([404, expect.stringContaining(`Responses API is not served here: use ${chatRoute}`)]);
      const legacy = await post(base, '/completions', { model: 'mistral/small', prompt: 'Bonjour' });
      expect([legacy.status, legacy.body.error.message]).toEqual([404, expect.stringContaining(`as a user message to ${chatRoute}.`)]);
    }
  });

  it("the openai SDK's speech translation and synthesis are told what is served instead, or that nothing is", async () => {
    for (const [base, prefix] of [
      [gw.baseA, '/v1'],
      [gw.baseB, '/alt/v1'],
    ] as const) {
      const client = new OpenAI({ apiKey: key, baseURL: base, maxRetries: 0 });
      const translated = await client.audio.translations
        .create({ model: 'openai/whisper-large-v3', file: await toFile(Buffer.from('RIFF'), 'a.wav') })
        .catch((e: unknown) => e);
      expect(translated).toBeInstanceOf(OpenAI.NotFoundError);
      expect((translated as InstanceType<typeof OpenAI.NotFoundError>).message).toContain(
        `Translation of speech into English is not served here: POST ${prefix}/audio/transcriptions transcribes it`,
      );
      const spoken = await client.audio.speech.create({ model: 'tts-1', voice: 'alloy', input: 'Bonjour' }).catch((e: unknown) => e);
      expect(spoken).toBeInstanceOf(OpenAI.NotFoundError);
      expect((spoken as InstanceType<typeof OpenAI.NotFoundError>).message).toContain('Speech synthesis (text to speech) is not served by this gateway.');
    }
  });

  it('an unknown model is 404 (A) / 400 (B) model_not_found; a retired one is 410 model_deprecated (A)', async () => {
    const ra = await post(gw.baseA, '/chat/completions', chat({ model: 'nobody/nothing' }));
    expect([ra.status, ra.body.error.code]).toEqual([404, 'model_not_found']);
    const rb = await post(gw.baseB, '/chat/completions', chat({ model: 'nobody/nothing' }));
    expect([rb.status, rb.body.error.code]).toEqual([400, 'model_not_found']);
    expect(ra.body.error.message).toBe("The model 'nobody/nothing' does not exist. Model ids are '<family>/<model>', as GET /v1/models lists them.");
    // Each variant points at its own list: B's client reads B's envelope and B's model fields there.
    expect(rb.body.error.message).toBe("The model 'nobody/nothing' does not exist. Model ids are '<family>/<model>', as GET /alt/v1/models lists them.");
    // A model named without its family, or by a provider's own name: the gateway's id is suggested.
    // So is the id written in another case, with spaces around it, or with its suffix in capitals (ids are matched exactly).
    for (const named of [
      'llama-3.3-70b',
      'llama-3.3-70b-instruct',
      'Meta/Llama-3.3-70B',
      ' meta/llama-3.3-70b',
      'meta/llama-3.3-70b\n',
      'meta/llama-3.3-70b:EU',
    ]) {
      const r = await post(gw.baseA, '/chat/completions', chat({ model: named }));
      expect([named, r.status, r.body.error.message]).toEqual([named, 404, expect.stringContaining("Did you mean 'meta/llama-3.3-70b'?")]);
    }
    const dep = await post(gw.baseA, '/chat/completions', chat({ model: 'mistral/nemo' }));
    expect([dep.status, dep.body.error.code]).toEqual([410, 'model_deprecated']);
    // Asked for by id, a retired model is told retired in both variants, as a chat request naming it is.
    const auth = { headers: { authorization: `Bearer ${key}` } };
    const [getA, getB, chatB] = [
      await fetch(`${gw.baseA}/models/mistral%2Fnemo`, auth),
      await fetch(`${gw.baseB}/models/mistral%2Fnemo`, auth),
      await post(gw.baseB, '/chat/completions', chat({ model: 'mistral/nemo' })),
    ];
    const errorOf = async (r: Response) => ((await r.json()) as Envelope).error;
    expect([getA.status, (await errorOf(getA)).code]).toEqual([410, 'model_deprecated']);
    const b = await errorOf(getB);
    expect([getB.status, b.code, b.message]).toEqual([400, 'model_not_found', chatB.body.error.message]);
    expect(b.message).toMatch(/retired upstream/);
  });

  it('the hint for an unknown model names only a model the caller may then use', async () => {
    const hint = async (base: string, path: string, body: unknown, headers: Record<string, string> = {}) => {
      const r = await post(base, path, body, headers);
      expect(r.body.error.code).toBe('model_not_found');
      return /Did you mean ([^?]*)\?/.exec(r.body.error.message)?.[1] ?? null;
    };
    const embed = (model: string) => ({ model, input: 'a' });
    // Variant B's embeddings serve the beta models only: a model outside the beta is not suggested there, as it is in A.
    expect(await hint(gw.baseB, '/embeddings', embed('bge-multilingual-gemma2'))).toBeNull();
    expect(await hint(gw.baseA, '/embeddings', embed('bge-multilingual-gemma2'))).toBe("'baai/bge-multilingual-gemma2'");
    expect(await hint(gw.baseB, '/embeddings', embed('bge-m3'))).toBe("'baai/bge-m3'");
    // Neither a model of another kind, nor a retired one.
    expect(await hint(gw.baseA, '/chat/completions', chat({ model: 'mistral-embed' }))).toBeNull();
    expect(await hint(gw.baseA, '/embeddings', embed('mistral-embed'))).toBe("'mistral/embed'");
    expect(await hint(gw.baseA, '/chat/completions', chat({ model: 'open-mistral-nemo' }))).toBeNull();
    // In a workspace, only its enabled models.
    const ws = await gw.admin<{ id: string }>('POST', '/workspaces', { name: 'hints', enabledModels: ['mistral/small'] });
    const own = await gw.createKey({ workspaceId: ws.body.id });
    const as = { authorization: `Bearer ${own.key}` };
    for (const base of [gw.baseA, gw.baseB]) {
      expect(await hint(base, '/chat/completions', chat({ model: 'llama-3.3-70b' }), as)).toBeNull();
      expect(await hint(base, '/chat/completions', chat({ model: 'small' }), as)).toBe("'mistral/small'");
      expect(await hint(base, '/chat/completions', chat({ model: 'llama-3.3-70b' }))).toBe("'meta/llama-3.3-70b'");
    }
  });

  it('a body that is JSON but not an object says what was sent; a POST with no body at all says it is empty', async () => {
    for (const [base, code] of [
      [gw.baseA, 'validation_error'],
      [gw.baseB, 'invalid_request'],
    ] as const) {
      for (const path of ['/chat/completions', '/embeddings', '/rerank']) {
        for (const [sent, what] of [
          ['[1]', 'an array'],
          ['"hi"', 'a string'],
          ['null', 'null'],
          ['5', 'a number'],
        ]) {
          const r = await post(base, path, sent);
          expect([path, sent, r.status, r.body.error.code, r.body.error.message]).toEqual([
            path,
            sent,
            400,
            code,
            `Invalid body: the body must be a JSON object, not ${what}.`,
          ]);
        }
        // Neither a body nor a Content-Type: nothing to parse, so the schema met no body.
        const res = await fetch(`${base}${path}`, { method: 'POST', headers: { authorization: `Bearer ${key}` } });
        const body = (await res.json()) as Envelope;
        expect([path, res.status, body.error.code, body.error.message]).toEqual([path, 400, code, 'The request body is empty; send a JSON object.']);
      }
    }
  });

  it('GET /models/{id} with a near-miss id suggests the id meant, among the models its variant lists', async () => {
    const get = async (base: string, path: string, headers: Record<string, string> = {}) => {
      const r = await fetch(`${base}${path}`, { headers: { authorization: `Bearer ${key}`, ...headers } });
      return { status: r.status, error: ((await r.json()) as Envelope).error };
    };
    for (const [base, status, list] of [
      [gw.baseA, 404, '/v1/models'],
      [gw.baseB, 400, '/alt/v1/models'],
    ] as const) {
      // Named without its family, in another case (encoded or with its slash unencoded), or by a provider's own name.
      for (const path of ['/models/small', '/models/Mistral%2FSmall', '/models/Mistral/Small', '/models/mistral-small-latest']) {
        const r = await get(base, path);
        expect([path, r.status, r.error.code, r.error.param, r.error.message]).toEqual([
          path,
          status,
          'model_not_found',
          'id',
          expect.stringContaining(`Did you mean 'mistral/small'? Model ids are '<family>/<model>', as GET ${list} lists them.`),
        ]);
      }
      // Never a retired model.
      expect((await get(base, '/models/nemo')).error.message).not.toContain('Did you mean');
    }
    // B's list hides an embedding model outside its beta, and a model its workspace does not enable: so does the hint.
    expect((await get(gw.baseA, '/models/bge-multilingual-gemma2')).error.message).toContain("Did you mean 'baai/bge-multilingual-gemma2'?");
    expect((await get(gw.baseB, '/models/bge-multilingual-gemma2')).error.message).not.toContain('Did you mean');
    const ws = await gw.admin<{ id: string }>('POST', '/workspaces', { name: 'model-hints', enabledModels: ['mistral/small'] });
    const own = await gw.createKey({ workspaceId: ws.body.id });
    const as = { authorization: `Bearer ${own.key}` };
    expect((await get(gw.baseB, '/models/llama-3.3-70b', as)).error.message).not.toContain('Did you mean');
    expect((await get(gw.baseB, '/models/small', as)).error.message).toContain("Did you mean 'mistral/small'?");
  });

  it('a request refused for its body or its model, in the handler as in the schema, leaves no usage record', async () => {
    const own = await gw.createKey();
    const as = { authorization: `Bearer ${own.key}` };
    const refused = [
      await post(gw.baseA, '/chat/completions', chat({ stream_options: { include_usage: true } }), as),
      await post(gw.baseA, '/chat/completions', chat({ tool_choice: 'required' }), as),
      await post(gw.baseA, '/chat/completions', chat({ max_tokens: 10_000_000 }), as),
      await post(gw.baseA, '/rerank', { model: 'cohere/rerank-v3.5', query: 'q', documents: [{ title: 'x' }] }, as),
      await post(gw.baseA, '/rerank', { model: 'cohere/rerank-v3.5', query: 'q', documents: [{ title: 'x' }], rank_fields: ['body'] }, as),
      await post(gw.baseB, '/embeddings', { model: 'baai/bge-multilingual-gemma2', input: 'x' }, as),
    ];
    const form = new FormData();
    form.append('file', new Blob([wav(1)], { type: 'audio/wav' }), 'a.wav');
    form.append('model', 'openai/whisper-large-v3');
    form.append('timestamp_granularities[]', 'word');
    const audio = await fetch(`${gw.baseA}/audio/transcriptions`, { method: 'POST', headers: as, body: form });
    expect([...refused.map((r) => r.status), audio.status]).toEqual([400, 400, 400, 400, 400, 400, 400]);
    // A request that passed them is recorded: the check below can see a record.
    expect((await post(gw.baseA, '/chat/completions', chat(), as)).status).toBe(200);
    await gw.gateway.services.usage.flush();
    const records = await gw.gateway.services.store.usage.list({ keyId: own.id });
    expect(records.map((r) => [r.kind, r.status])).toEqual([['chat', 200]]);
  });

  it('the SDK maps them to its error classes', async () => {
    const a = new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 0 });
    await expect(a.chat.completions.create({ model: 'nobody/nothing', messages: [{ role: 'user', content: 'x' }] })).rejects.toBeInstanceOf(
      OpenAI.NotFoundError,
    );
    const bad = new OpenAI({ apiKey: 'gw_live_nope', baseURL: gw.baseB, maxRetries: 0 });
    const err = await bad.models.list().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.AuthenticationError);
    expect((err as InstanceType<typeof OpenAI.APIError>).code).toBe('invalid_api_key');
  });

  it('missing, malformed, unknown and revoked keys are 401 unauthorized (A) / invalid_api_key (B)', async () => {
    const revoked = await gw.createKey();
    expect((await gw.admin('POST', `/keys/${revoked.id}/revoke`)).status).toBe(200);
    const cases: (string | undefined)[] = [undefined, 'Basic abc', 'Bearer gw_live_short', `Bearer gw_live_${'A'.repeat(43)}`, `Bearer ${revoked.key}`];
    for (const auth of cases) {
      for (const [base, code] of [
        [gw.baseA, 'unauthorized'],
        [gw.baseB, 'invalid_api_key'],
      ] as const) {
        const res = await fetch(`${base}/models`, { headers: auth ? { authorization: auth } : {} });
        expect(res.status, `${auth} on ${base}`).toBe(401);
        expect(((await res.json()) as Envelope).error.code).toBe(code);
        expect(res.headers.get('x-request-id')).toMatch(/^req_/);
      }
    }
  });

  it('routing headers out of range are 400s', async () => {
    const strategy = await post(gw.baseA, '/chat/completions', chat(), { 'X-Gateway-Strategy': 'random' });
    expect([strategy.status, strategy.body.error.param]).toEqual([400, 'X-Gateway-Strategy']);
    const hops = await post(gw.baseB, '/chat/completions', chat(), { 'X-Gateway-Max-Hops': '6' });
    expect([hops.status, hops.body.error.code]).toEqual([400, 'invalid_request']);
    const unknownA = await post(gw.baseA, '/chat/completions', chat(), { 'X-Gateway-Provider': 'aws' });
    expect([unknownA.status, unknownA.body.error.code]).toEqual([400, 'validation_error']);
    const notHostingB = await post(gw.baseB, '/chat/completions', chat(), { 'X-Gateway-Provider': 'cohere' });
    expect([notHostingB.status, notHostingB.body.error.code]).toEqual([400, 'provider_unsupported']);
    // A long value is named, not sent back whole.
    const long = await post(gw.baseA, '/chat/completions', chat(), { 'X-Gateway-Strategy': 'x'.repeat(8000) });
    expect(long.body.error.message).toBe(`Invalid X-Gateway-Strategy '${'x'.repeat(64)}…': expected one of default, cheapest, fastest, best.`);
    // A header's UTF-8 bytes (the header given as the characters of those bytes, as a byte string goes on the wire).
    const utf8 = await post(gw.baseA, '/chat/completions', chat(), { 'X-Gateway-Strategy': Buffer.from('günstig', 'utf8').toString('latin1') });
    expect(utf8.body.error.message).toMatch(/^Invalid X-Gateway-Strategy 'günstig'/);
  });

  it('a body over the limit is 413 without being read whole', async () => {
    const big = JSON.stringify(chat({ messages: [{ role: 'user', content: 'x'.repeat(200_000) }] }));
    const r = await post(gw.baseA, '/chat/completions', big);
    expect(r.status).toBe(413);
    expect(r.body.error.code).toBe('payload_too_large');
    // Declared (Content-Length) or counted as it arrives (chunked, no length to refuse it from): the limit is said both ways.
    const chunked = (text: string) =>
      new ReadableStream<Uint8Array>({
        start(c) {
          c.enqueue(new TextEncoder().encode(text));
          c.close();
        },
      });
    for (const [base, type] of [
      [gw.baseA, 'payload_too_large'],
      [gw.baseB, 'invalid_request_error'],
    ] as const) {
      for (const body of [big, chunked(big)]) {
        const res = await fetch(`${base}/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body,
          duplex: 'half',
        } as RequestInit);
        expect([base, typeof body, res.status, ((await res.json()) as Envelope).error]).toEqual([
          base,
          typeof body,
          413,
          { type, code: 'payload_too_large', param: null, message: 'The request body is larger than this gateway accepts (65536 bytes).' },
        ]);
      }
    }
  });

  it('routes still to come answer 501 not_implemented in the envelope; unknown routes 404', async () => {
    const r = await fetch(`${gw.baseB}/batches`, { headers: { authorization: `Bearer ${key}` } });
    expect(r.status).toBe(501);
    const body = (await r.json()) as Envelope;
    expect(body.error.code).toBe('not_implemented');
    // It names the path as the client sent it, under B's mount.
    expect(body.error.message).toMatch(/^GET \/alt\/v1\/batches /);
    expect(r.headers.get('x-should-retry')).toBe('false');
    // So the SDK, which retries a 5xx twice by default, asks once.
    let attempts = 0;
    const counting: typeof fetch = (input, init) => {
      attempts++;
      return fetch(input, init);
    };
    const sdk = new OpenAI({ apiKey: key, baseURL: gw.baseA, fetch: counting });
    await expect(sdk.files.list()).rejects.toBeInstanceOf(OpenAI.APIError);
    expect(attempts).toBe(1);
    // An upload the way OpenAI's files API takes it (multipart) is told the same, not sent back to JSON with a 415.
    const upload = await sdk.files.create({ file: new File(['{"a":1}\n'], 'in.jsonl'), purpose: 'batch' }).catch((e: unknown) => e);
    expect((upload as InstanceType<typeof OpenAI.APIError>).status).toBe(501);
    expect((upload as InstanceType<typeof OpenAI.APIError>).code).toBe('not_implemented');
    // The key is checked first.
    const anonymous = await fetch(`${gw.baseA}/files`, { method: 'POST', body: new FormData() });
    expect(anonymous.status).toBe(401);
    const nf = await fetch(`${gw.url}/v3/nothing`);
    expect(nf.status).toBe(404);
    expect(((await nf.json()) as Envelope).error.code).toBe('not_found');
    expect(nf.headers.get('x-request-id')).toMatch(/^req_/);
    // Each mount its own envelope, even for a path it does not have.
    const types = [];
    for (const path of ['/v3/nothing', '/alt/nothing', '/alt/v3/x', '/alt/v1/nope']) {
      const res = await fetch(`${gw.url}${path}`, { headers: { authorization: `Bearer ${key}` } });
      types.push([path, res.status, ((await res.json()) as { error: { type: string } }).error.type]);
    }
    expect(types).toEqual([
      ['/v3/nothing', 404, 'not_found'],
      ['/alt/nothing', 404, 'invalid_request_error'],
      ['/alt/v3/x', 404, 'invalid_request_error'],
      ['/alt/v1/nope', 404, 'invalid_request_error'],
    ]);
  });

  it('a method a path does not take is 405 with Allow, in the variant’s envelope; a path with no route at all stays 404', async () => {
    const auth = { authorization: `Bearer ${key}` };
    const answers = [];
    for (const [method, path] of [
      ['GET', '/v1/chat/completions'],
      ['DELETE', '/alt/v1/models'],
      ['PUT', '/v1/models/mistral%2Fsmall'],
      ['GET', '/v1/nothing'],
    ] as const) {
      const res = await fetch(`${gw.url}${path}`, { method, headers: auth });
      const body = (await res.json()) as Envelope & { error: { type: string; message: string } };
      answers.push([res.status, res.headers.get('allow'), body.error.code, body.error.type]);
    }
    expect(answers).toEqual([
      [405, 'POST', 'method_not_allowed', 'method_not_allowed'],
      [405, 'GET, HEAD', 'method_not_allowed', 'invalid_request_error'],
      [405, 'GET, HEAD', 'method_not_allowed', 'method_not_allowed'],
      [404, null, 'not_found', 'not_found'],
    ]);
    // The key is still checked first on the public API.
    expect((await fetch(`${gw.baseA}/chat/completions`)).status).toBe(401);
  });

  it('a method or path with no route is its 405 or 404 whatever its JSON body, empty or not JSON, not a 400 about the body', async () => {
    const json = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    const answers = [];
    for (const [method, path, body, headers] of [
      ['DELETE', '/v1/models/mistral%2Fsmall', undefined, json],
      ['PUT', '/alt/v1/chat/completions', '{"model":', json],
      ['PATCH', '/v1/nothing', '', json],
      ['PUT', '/admin/v1/keys', '{x', { ...json, authorization: `Bearer ${ADMIN_TOKEN}` }],
    ] as const) {
      const res = await fetch(`${gw.url}${path}`, { method, headers, body });
      const error = ((await res.json()) as Envelope).error;
      answers.push([method, path, res.status, error.code, res.headers.get('allow')]);
    }
    expect(answers).toEqual([
      ['DELETE', '/v1/models/mistral%2Fsmall', 405, 'method_not_allowed', 'GET, HEAD'],
      ['PUT', '/alt/v1/chat/completions', 405, 'method_not_allowed', 'POST'],
      ['PATCH', '/v1/nothing', 404, 'not_found', null],
      ['PUT', '/admin/v1/keys', 405, 'method_not_allowed', 'GET, HEAD, POST'],
    ]);
    // A route that takes the method still refuses such a body.
    const empty = await post(gw.baseA, '/chat/completions', '');
    expect([empty.status, empty.body.error.message]).toEqual([400, 'The request body is empty; send a JSON object.']);
  });

  it('an unknown field named as one of every object’s own (constructor, toString, __proto__) is refused in plain words', async () => {
    const messages = [
      (await post(gw.baseA, '/embeddings', '{"model":"mistral/embed","input":"x","constructor":1}')).body.error.message,
      (await post(gw.baseB, '/embeddings', '{"model":"mistral/embed","input":"x","toString":1}')).body.error.message,
    ];
    const listed = await fetch(`${gw.url}/admin/v1/keys?hasOwnProperty=1`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    messages.push(((await listed.json()) as Envelope).error.message);
    const form = new FormData();
    form.append('model', 'openai/whisper-large-v3');
    form.append('__proto__', 'x');
    form.append('file', new Blob([wav(1)], { type: 'audio/wav' }), 'a.wav');
    const audio = await fetch(`${gw.baseA}/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: form });
    messages.push(((await audio.json()) as Envelope).error.message);
    expect(messages).toEqual([
      "Invalid body: 'constructor' is not a known field.",
      "Invalid body: 'toString' is not a known field.",
      "Invalid querystring: 'hasOwnProperty' is not a known field.",
      "Invalid body: '__proto__' is not a known field.",
    ]);
  });

  it('a key or the admin token sent as a field or filter name is not repeated, in the message or in param', async () => {
    const answers = [
      (await fetch(`${gw.baseA}/models?${key}`, { headers: { authorization: `Bearer ${key}` } })).json(),
      (await fetch(`${gw.baseB}/models?${ADMIN_TOKEN}`, { headers: { authorization: `Bearer ${key}` } })).json(),
      post(gw.baseA, '/embeddings', `{"model":"mistral/embed","input":"x","${key}":1}`).then((r) => r.body),
      fetch(`${gw.url}/admin/v1/keys`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
        body: JSON.stringify({ [ADMIN_TOKEN]: 1 }),
      }).then((r) => r.json()),
    ];
    for (const answer of (await Promise.all(answers)) as Envelope[]) {
      expect(answer.error).toMatchObject({ param: '[redacted]', message: expect.stringContaining("'[redacted]'") });
      expect(JSON.stringify(answer)).not.toContain(key);
      expect(JSON.stringify(answer)).not.toContain(ADMIN_TOKEN);
    }
  });

  it('never reflects an arbitrary Origin', async () => {
    const res = await fetch(`${gw.baseA}/models`, { headers: { authorization: `Bearer ${key}`, origin: 'https://evil.example' } });
    expect(res.headers.get('access-control-allow-origin')).toBeNull();
    const pre = await fetch(`${gw.baseA}/chat/completions`, {
      method: 'OPTIONS',
      headers: { origin: 'https://evil.example', 'access-control-request-method': 'POST' },
    });
    expect(pre.headers.get('access-control-allow-origin')).toBeNull();
  });
});
