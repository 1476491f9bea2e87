import { connect } from 'node:net';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { wav } from './helpers/audio.js';
import { ADMIN_TOKEN, resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';
import { readSse } from './helpers/sse.js';

/**
 * Every answer the running gateway gives, checked against what its own OpenAPI
 * description says for that route, status and content type: typed clients are
 * generated from it, so an answer it does not describe breaks them.
 */

interface Schema {
  type?: string;
  [k: string]: unknown;
}
interface Media {
  schema?: Schema;
  /** One `data:` event of an event stream. */
  'x-event-schema'?: Schema;
}
interface Header {
  required?: boolean;
  schema?: Schema;
}
interface Answer {
  description?: string;
  headers?: Record<string, Header>;
  content?: Record<string, Media>;
}
interface Operation {
  responses: Record<string, Answer>;
}
interface Doc {
  paths: Record<string, Record<string, Operation>>;
}

let gw: TestGateway;
let doc: Doc;
// Strict: a keyword or format ajv does not know is an error, and so is a union's type left implicit.
const ajv = new Ajv2020({ strict: true, allErrors: true, strictRequired: false, strictTypes: 'log', validateFormats: true });
const compiled = new Map<unknown, ValidateFunction>();
const problems: string[] = [];
/** `METHOD path status-key` of every documented answer a request got. */
const exercised = new Set<string>();

function validator(schema: Schema): ValidateFunction {
  let v = compiled.get(schema);
  if (!v) {
    v = ajv.compile(schema);
    compiled.set(schema, v);
  }
  return v;
}

/**
 * The schema with every object that names its properties closed to others (`unevaluatedProperties: false`), so that
 * a field an answer carries and the description leaves out fails it: `additionalProperties: true` keeps a body valid,
 * but a generated client has no type for such a field (openapi-typescript gives it `unknown`).
 */
function closed(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(closed);
  if (!schema || typeof schema !== 'object') return schema;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(schema))
    out[k] = k === 'properties' ? Object.fromEntries(Object.entries(v as object).map(([n, p]) => [n, closed(p)])) : closed(v);
  if (out['properties'] && (out['additionalProperties'] === undefined || out['additionalProperties'] === true)) {
    delete out['additionalProperties'];
    out['unevaluatedProperties'] = false;
  }
  return out;
}
const closedCompiled = new Map<unknown, ValidateFunction>();

/** The fields of `body` no property of its schema names (`/choices/0/message/tool_calls`); of a union, those of the branch it matches. */
function undocumentedFields(schema: Schema, body: unknown): string[] {
  const branches = ((schema['anyOf'] as Schema[] | undefined) ?? [schema]).filter((branch) => validator(branch)(body));
  let fields: string[] = [];
  for (const branch of branches) {
    let v = closedCompiled.get(branch);
    if (!v) {
      v = ajv.compile(closed(branch) as Schema);
      closedCompiled.set(branch, v);
    }
    if (v(body)) return [];
    fields = (v.errors ?? []).filter((e) => e.keyword === 'unevaluatedProperties').map((e) => `${e.instancePath}/${e.params['unevaluatedProperty']}`);
  }
  return [...new Set(fields)];
}

/** The documented answer for a status: the exact code first, then its range (4XX), then default. */
function documented(op: Operation, status: number): [string, Answer] | undefined {
  for (const key of [String(status), `${String(status)[0]}XX`, 'default']) {
    const answer = op.responses[key];
    if (answer) return [key, answer];
  }
  return undefined;
}

function headerValue(schema: Schema | undefined, raw: string): unknown {
  if (schema?.type === 'integer' || schema?.type === 'number') return /^-?\d+(\.\d+)?$/.test(raw) ? Number(raw) : raw;
  if (schema?.type === 'boolean') return raw === 'true' ? true : raw === 'false' ? false : raw;
  return raw;
}

/** Checks one answer against the description of `method path`; the body is read here. Returns the parsed body (JSON or text). */
async function conform(label: string, res: Response, method: string, path: string, expectStatus?: number): Promise<unknown> {
  const where = `${label}: ${method.toUpperCase()} ${path} ${res.status}`;
  const type = res.headers.get('content-type')?.split(';')[0]?.trim() ?? '';
  const text = type === 'text/event-stream' ? '' : await res.text();
  if (expectStatus !== undefined && res.status !== expectStatus) problems.push(`${where}: expected status ${expectStatus}; body ${text.slice(0, 300)}`);
  const op = doc.paths[path]?.[method];
  if (!op) {
    problems.push(`${where}: no such operation in the description`);
    return text;
  }
  const found = documented(op, res.status);
  if (!found) {
    problems.push(`${where}: status not documented (documented: ${Object.keys(op.responses).join(', ')})`);
    return text;
  }
  const [key, answer] = found;
  // A generated client types an error by its status: each one an operation gives is listed with its own codes.
  if (key !== String(res.status)) problems.push(`${where}: status documented only by ${key}`);
  exercised.add(`${method} ${path} ${key}`);
  // And each header of the gateway's own it sends is documented for that answer, so a generated client can read it.
  const named = new Set(Object.keys(answer.headers ?? {}).map((h) => h.toLowerCase()));
  for (const [name, value] of res.headers) {
    if (/^(x-|retry-after|idempotent-replayed)/.test(name) && !named.has(name)) problems.push(`${where}: header ${name}: ${value} sent, not documented`);
  }
  for (const [name, header] of Object.entries(answer.headers ?? {})) {
    const raw = res.headers.get(name);
    if (raw === null) {
      if (header.required) problems.push(`${where}: required header ${name} missing`);
      continue;
    }
    if (header.schema && !validator(header.schema)(headerValue(header.schema, raw)))
      problems.push(`${where}: header ${name}: ${raw} does not match ${JSON.stringify(header.schema)}`);
  }
  if (res.status === 204 || (text === '' && type === '')) {
    if (answer.content) problems.push(`${where}: empty answer, the description gives content ${Object.keys(answer.content).join(', ')}`);
    return text;
  }
  const media = answer.content?.[type];
  if (!media) {
    problems.push(`${where}: content type ${type || '(none)'} not documented (documented: ${Object.keys(answer.content ?? {}).join(', ') || 'none'})`);
    return text;
  }
  if (type === 'text/event-stream') return checkStream(where, res, media);
  let body: unknown = text;
  if (type === 'application/json') {
    try {
      body = JSON.parse(text);
    } catch {
      problems.push(`${where}: body is not JSON: ${text.slice(0, 200)}`);
      return text;
    }
  }
  if (media.schema) {
    const v = validator(media.schema);
    if (!v(body)) problems.push(`${where}: body ${JSON.stringify(body).slice(0, 300)} does not match: ${ajv.errorsText(v.errors)}`);
    else for (const field of undocumentedFields(media.schema, body)) problems.push(`${where}: field ${field} sent, not documented`);
  }
  return body;
}

/** An event stream: every `data:` JSON event against the chunk schema the description gives (an error event against the error schema). */
async function checkStream(where: string, res: Response, media: Media): Promise<unknown> {
  const events = await readSse(res);
  if (events.at(-1)?.data !== '[DONE]' && !events.at(-1)?.data.includes('"error"')) problems.push(`${where}: stream ended without [DONE]`);
  const chunk = media['x-event-schema'];
  const undocumented = new Set<string>();
  for (const e of events) {
    if (e.data === '[DONE]') continue;
    if (!chunk) {
      problems.push(`${where}: the event stream has no chunk schema to check its events against`);
      break;
    }
    const v = validator(chunk);
    const event = JSON.parse(e.data) as unknown;
    if (!v(event)) problems.push(`${where}: event ${e.data.slice(0, 300)} does not match: ${ajv.errorsText(v.errors)}`);
    else for (const field of undocumentedFields(chunk, event)) undocumented.add(field);
  }
  for (const field of undocumented) problems.push(`${where}: event field ${field} sent, not documented`);
  return events;
}

/**
 * Sends `text` on a fresh connection, the body left unfinished, and reads the answer until the gateway closes it.
 * With `after`: the connection is first answered a health check, then `text` is sent once `after` has resolved (a
 * request on a connection the instance already had when it began to drain).
 */
function rawAnswer(port: number, text: string, after?: (answered: Promise<void>) => Promise<void>): Promise<Response> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let out = '';
    let skip = 0;
    let answered = () => {};
    const first = new Promise<void>((r) => {
      answered = r;
    });
    socket.on('data', (d) => {
      out += String(d);
      if (after && skip === 0 && out.endsWith('}')) {
        skip = out.length;
        answered();
      }
    });
    socket.on('error', () => {});
    socket.on('close', () => {
      const answer = out.slice(skip);
      const at = answer.indexOf('\r\n\r\n');
      if (at === -1) return reject(new Error(`closed with no answer: ${JSON.stringify(out)}`));
      const [status, ...lines] = answer.slice(0, at).split('\r\n');
      const headers = lines.map((l) => [l.slice(0, l.indexOf(':')), l.slice(l.indexOf(':') + 1).trim()] as [string, string]);
      resolve(new Response(answer.slice(at + 4), { status: Number(status?.split(' ')[1]), headers }));
    });
    if (!after) return socket.write(text);
    socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
    void after(first).then(() => socket.write(text));
  });
}

const json = (key: string | null, body: unknown, headers: Record<string, string> = {}): RequestInit => ({
  method: 'POST',
  headers: { ...(key ? { authorization: `Bearer ${key}` } : {}), 'content-type': 'application/json', ...headers },
  body: typeof body === 'string' ? body : JSON.stringify(body),
});
const get = (key: string | null, headers: Record<string, string> = {}): RequestInit => ({
  headers: { ...(key ? { authorization: `Bearer ${key}` } : {}), ...headers },
});
const chatBody = (model = 'mistral/small', extra: Record<string, unknown> = {}) => ({ model, messages: [{ role: 'user', content: 'hi' }], ...extra });

function audioForm(format?: string, withFile = true, model = 'openai/whisper-large-v3', file: Blob = new Blob([wav(1)], { type: 'audio/wav' })): FormData {
  const form = new FormData();
  if (withFile) form.set('file', file, 'a.wav');
  form.set('model', model);
  if (format) form.set('response_format', format);
  return form;
}

beforeAll(async () => {
  gw = await startGateway({
    env: {
      GW_BODY_LIMIT_BYTES: '65536',
      GW_UPLOAD_LIMIT_BYTES: '65536',
      GW_CIRCUIT_FAILURES: '2',
      GW_CIRCUIT_OPEN_MS: '300',
      GW_IDEMPOTENCY_WAIT_MS: '50',
      GW_REQUEST_TIMEOUT_MS: '1000',
    },
    catalogue: (c) => ({
      ...c,
      // Every provider answers within 500 ms or times out, so a 504 is quick.
      providers: c.providers.map((p) => ({ ...p, timeoutMs: 500, connectTimeoutMs: 500 })),
      // A retired model of each kind but chat (which has mistral/nemo), for the 410 of every model route.
      models: [
        ...c.models,
        ...['mistral/embed', 'cohere/rerank-v3.5', 'openai/whisper-large-v3'].map((id) => ({
          ...(c.models.find((m) => m.id === id) as (typeof c.models)[number]),
          id: `${id}-retired`,
          deprecated: true,
        })),
      ],
    }),
  });
  doc = (await (await fetch(`${gw.url}/openapi.json`)).json()) as Doc;
});
afterAll(() => gw?.close());

const VARIANTS = [
  ['A', '', 'a'],
  ['B', '/alt', 'b'],
] as const;

describe('OpenAPI conformance: every answer is the one the description gives', () => {
  it.each(VARIANTS)('variant %s: the public API', async (variant, mount) => {
    resetProviders(gw.sim);
    const base = `${gw.url}${mount}/v1`;
    const p = (suffix: string) => `${mount}/v1${suffix}`;
    const { key } = await gw.createKey({ rateLimitRpm: 10_000 });
    const call = async (label: string, method: string, path: string, url: string, init: RequestInit, status?: number) =>
      conform(`${variant} ${label}`, await fetch(url, { method: method.toUpperCase(), ...init }), method, path, status);

    // Models.
    await call('models', 'get', p('/models'), `${base}/models`, get(key), 200);
    await call('models filtered', 'get', p('/models'), `${base}/models?${variant === 'A' ? 'kind=chat' : 'family=mistral'}`, get(key), 200);
    await call('models bad query', 'get', p('/models'), `${base}/models?kind=nope&family=`, get(key), 400);
    await call('models no key', 'get', p('/models'), `${base}/models`, get(null), 401);
    await call('model', 'get', p('/models/{id}'), `${base}/models/mistral%2Fsmall`, get(key), 200);
    await call('model unknown', 'get', p('/models/{id}'), `${base}/models/nope%2Fnope`, get(key), variant === 'A' ? 404 : 400);
    await call('model no key', 'get', p('/models/{id}'), `${base}/models/mistral%2Fsmall`, get(null), 401);
    await call('model slashed', 'get', p('/models/{family}/{model}'), `${base}/models/mistral/small`, get(key), 200);
    await call('model slashed unknown', 'get', p('/models/{family}/{model}'), `${base}/models/nope/nope`, get(key), variant === 'A' ? 404 : 400);

    // Chat, its successes and the errors SPEC.md and docs/errors.md give.
    const chat = p('/chat/completions');
    const chatUrl = `${base}/chat/completions`;
    await call('chat', 'post', chat, chatUrl, json(key, chatBody()), 200);
    await call('chat reasoning', 'post', chat, chatUrl, json(key, chatBody('deepseek/r1-distill-70b')), 200);
    await call('chat stream', 'post', chat, chatUrl, json(key, chatBody('mistral/small', { stream: true, stream_options: { include_usage: true } })), 200);
    await call('chat stream reasoning', 'post', chat, chatUrl, json(key, chatBody('deepseek/r1-distill-70b', { stream: true })), 200);
    // Each provider's stream, as its adapter relays it.
    for (const [model, provider] of [
      ['mistral/small', 'mistral'],
      ['meta/llama-3.3-70b', 'ovh'],
      ['meta/llama-3.3-70b', 'nebius'],
      ['openai/gpt-4o-mini', 'azure'],
    ] as const) {
      const body = chatBody(model, { stream: true, stream_options: { include_usage: true } });
      await call(`chat stream ${provider}`, 'post', chat, chatUrl, json(key, body, { 'X-Gateway-Provider': provider }), 200);
      await call(`chat ${provider}`, 'post', chat, chatUrl, json(key, chatBody(model), { 'X-Gateway-Provider': provider }), 200);
    }
    // The fields an answer has only when asked for, from each provider as its adapter relays them: tool calls, log
    // probabilities, more than one choice, reasoning (each host's own way), OpenAI's deprecated functions API.
    const weather = { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } };
    const asked: [string, Record<string, unknown>][] = [
      ['tools', { tools: [{ type: 'function', function: weather }], tool_choice: 'required' }],
      ['logprobs', { logprobs: true, top_logprobs: 2 }],
      ['n', { n: 2 }],
      ['functions', { functions: [weather], function_call: { name: 'get_weather' } }],
    ];
    for (const [model, provider, extra] of [
      ['mistral/small', 'mistral', {}],
      ['mistral/medium', 'mistral', { reasoning_effort: 'high' }],
      ['mistral/small', 'scaleway', {}],
      ['meta/llama-3.3-70b', 'ovh', {}],
      ['deepseek/r1-distill-70b', 'ovh', {}],
      ['deepseek/r1-distill-70b', 'nebius', {}],
      ['openai/gpt-4o-mini', 'azure', {}],
    ] as const) {
      for (const [label, fields] of asked) {
        for (const stream of [{}, { stream: true, stream_options: { include_usage: true } }]) {
          const body = chatBody(model, { ...extra, ...fields, ...stream });
          // Mistral takes no logprobs, Scaleway neither top_logprobs nor n: refused before any is sent.
          const refused =
            (label === 'logprobs' && provider !== 'ovh' && provider !== 'nebius' && provider !== 'azure') || (label === 'n' && provider === 'scaleway');
          const at = `${label} ${model} ${provider}${'stream' in stream ? ' stream' : ''}`;
          await call(`chat ${at}`, 'post', chat, chatUrl, json(key, body, { 'X-Gateway-Provider': provider }), refused ? 400 : 200);
        }
      }
    }
    await call('chat bad body', 'post', chat, chatUrl, json(key, { model: 'mistral/small' }), 400);
    await call('chat bad json', 'post', chat, chatUrl, json(key, '{"model":'), 400);
    await call('chat bad header', 'post', chat, chatUrl, json(key, chatBody(), { 'X-Gateway-Max-Hops': '9' }), 400);
    await call('chat pinned elsewhere', 'post', chat, chatUrl, json(key, chatBody(), { 'X-Gateway-Provider': 'cohere' }), 400);
    await call('chat no key', 'post', chat, chatUrl, json(null, chatBody()), 401);
    await call('chat bad key', 'post', chat, chatUrl, json('gw_live_nope', chatBody()), 401);
    await call('chat unknown model', 'post', chat, chatUrl, json(key, chatBody('nope/nope')), variant === 'A' ? 404 : 400);
    await call('chat retired model', 'post', chat, chatUrl, json(key, chatBody('mistral/nemo')), variant === 'A' ? 410 : 400);
    await call('chat too large', 'post', chat, chatUrl, json(key, chatBody('mistral/small', { user: 'x'.repeat(70_000) })), 413);
    await call(
      'chat not json',
      'post',
      chat,
      chatUrl,
      { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'text/plain' }, body: 'hi' },
      415,
    );
    await call(
      'chat unknown stream',
      'post',
      chat,
      chatUrl,
      json(key, chatBody('mistral/small', { stream: true }), { 'Last-Event-ID': `req_${'0'.repeat(28)}:1` }),
      404,
    );
    const idem = { 'X-Idempotency-Key': `conformance-${variant}` };
    await call('chat idempotent', 'post', chat, chatUrl, json(key, chatBody(), idem), 200);
    await call('chat idempotent replay', 'post', chat, chatUrl, json(key, chatBody(), idem), 200);
    await call('chat idempotent other body', 'post', chat, chatUrl, json(key, chatBody('mistral/large'), idem), 422);
    // A provider's refusal is kept with its key as a success is, and its repeat is marked Idempotent-Replayed.
    gw.sim.providers.azure?.setFault({ kind: 'status', status: 400, times: 1 });
    const refusedIdem = { 'X-Idempotency-Key': `conformance-refused-${variant}` };
    await call('chat refused idempotent', 'post', chat, chatUrl, json(key, chatBody('openai/gpt-4o-mini'), refusedIdem), 400);
    await call('chat refused idempotent replay', 'post', chat, chatUrl, json(key, chatBody('openai/gpt-4o-mini'), refusedIdem), 400);
    const streamIdem = { 'X-Idempotency-Key': `conformance-stream-${variant}` };
    await call('chat stream idempotent', 'post', chat, chatUrl, json(key, chatBody('mistral/small', { stream: true }), streamIdem), 200);
    await call('chat stream idempotent replay', 'post', chat, chatUrl, json(key, chatBody('mistral/small', { stream: true }), streamIdem), 200);
    const first = await fetch(chatUrl, json(key, chatBody('mistral/small', { stream: true })));
    const [head] = await readSse(first, 1);
    await call('chat stream resumed', 'post', chat, chatUrl, json(key, chatBody('mistral/small', { stream: true }), { 'Last-Event-ID': head?.id ?? '' }), 200);
    // A repeat while the first is still running: 409 once GW_IDEMPOTENCY_WAIT_MS has passed.
    gw.sim.providers.scaleway?.setFault({ kind: 'latency', ms: 300, times: 1 });
    const busy = { 'X-Idempotency-Key': `conformance-busy-${variant}`, 'X-Gateway-Provider': 'scaleway' };
    const running = fetch(chatUrl, json(key, chatBody(), busy));
    await new Promise((r) => setTimeout(r, 100));
    await call('chat idempotent busy', 'post', chat, chatUrl, json(key, chatBody(), busy), 409);
    await conform(`${variant} chat idempotent first`, await running, 'post', chat, 200);
    resetProviders(gw.sim);

    const broke = await gw.createKey({ budget: 1e-12, rateLimitRpm: 10_000 });
    await call('chat over budget', 'post', chat, chatUrl, json(broke.key, chatBody()), 402);
    const slow = await gw.createKey({ rateLimitRpm: 1 });
    await call('chat within limit', 'post', chat, chatUrl, json(slow.key, chatBody()), 200);
    await call('chat over limit', 'post', chat, chatUrl, json(slow.key, chatBody()), 429);

    // Upstream failures, of a model with one provider. The timeout counts against it for a cap it generates within its
    // 500 ms at 20 tokens/s (a longer answer's would not: docs/routing.md).
    const [lone, upstream] = ['openai/gpt-4o-mini', gw.sim.providers.azure] as const;
    upstream?.setFault({ kind: 'hang', times: 1 });
    await call('chat upstream timeout', 'post', chat, chatUrl, json(key, chatBody(lone, { max_tokens: 8 })), 504);
    upstream?.setFault({ kind: 'status', status: 500 });
    await call('chat upstream 5xx', 'post', chat, chatUrl, json(key, chatBody(lone)), 502);
    // Its circuit is open now (GW_CIRCUIT_FAILURES 2), for 300 ms: no provider is available to begin with.
    await call('chat no healthy provider', 'post', chat, chatUrl, json(key, chatBody(lone)), variant === 'A' ? 503 : 502);
    upstream?.clearFaults();
    gw.sim.providers.scaleway?.setFault({ kind: 'error_after_200', afterChunks: 2, status: 500, times: 1 });
    await call('chat stream failing', 'post', chat, chatUrl, json(key, chatBody('mistral/small', { stream: true }), { 'X-Gateway-Provider': 'scaleway' }), 200);
    resetProviders(gw.sim);

    // Embeddings, rerank (both mounts), transcriptions.
    const emb = p('/embeddings');
    await call('embeddings', 'post', emb, `${base}/embeddings`, json(key, { model: 'mistral/embed', input: ['a', 'b'] }), 200);
    await call('embeddings base64', 'post', emb, `${base}/embeddings`, json(key, { model: 'mistral/embed', input: 'a', encoding_format: 'base64' }), 200);
    await call('embeddings bad body', 'post', emb, `${base}/embeddings`, json(key, { model: 'mistral/embed' }), 400);
    await call('embeddings no key', 'post', emb, `${base}/embeddings`, json(null, { model: 'mistral/embed', input: 'a' }), 401);
    await call('embeddings not json', 'post', emb, `${base}/embeddings`, { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: 'a' }, 415);
    gw.sim.providers.mistral?.setFault({ kind: 'status', status: 503, retryAfter: null, endpoints: ['embeddings'], times: 3 });
    await call('embeddings upstream 5xx', 'post', emb, `${base}/embeddings`, json(key, { model: 'mistral/embed', input: 'a' }), 502);
    // Every provider failed, the last with a 429: the 502 says when to retry (Retry-After), as a 503 does.
    gw.sim.providers.mistral?.setFault({ kind: 'status', status: 429, retryAfter: null, endpoints: ['embeddings'], times: 3 });
    const waited = await fetch(`${base}/embeddings`, json(key, { model: 'mistral/embed', input: 'a' }));
    if (!waited.headers.has('retry-after')) problems.push(`${variant} embeddings upstream 429: no Retry-After on its ${waited.status}`);
    await conform(`${variant} embeddings upstream 429`, waited, 'post', emb, 502);
    resetProviders(gw.sim);
    for (const [label, path, url] of [
      ['rerank', p('/rerank'), `${base}/rerank`],
      ['rerank v2', `${mount}/v2/rerank`, `${gw.url}${mount}/v2/rerank`],
    ] as const) {
      const body = { model: 'cohere/rerank-v3.5', query: 'q', documents: ['a', 'b', 'c'], top_n: 2 };
      await call(label, 'post', path, url, json(key, body), 200);
      await call(`${label} with documents`, 'post', path, url, json(key, { ...body, return_documents: true }), 200);
      await call(`${label} bad body`, 'post', path, url, json(key, { model: 'cohere/rerank-v3.5', query: 'q' }), 400);
      await call(`${label} no key`, 'post', path, url, json(null, body), 401);
      gw.sim.providers.cohere?.setFault({ kind: 'status', status: 500, endpoints: ['rerank'], times: 3 });
      await call(`${label} upstream 5xx`, 'post', path, url, json(key, body), 502);
      resetProviders(gw.sim);
    }
    const stt = p('/audio/transcriptions');
    const sttUrl = `${base}/audio/transcriptions`;
    for (const format of [undefined, 'json', 'verbose_json', 'text', 'srt', 'vtt'])
      await call(`transcription ${format}`, 'post', stt, sttUrl, { headers: { authorization: `Bearer ${key}` }, body: audioForm(format) }, 200);
    const words = audioForm('verbose_json');
    words.append('timestamp_granularities[]', 'word');
    await call('transcription words', 'post', stt, sttUrl, { headers: { authorization: `Bearer ${key}` }, body: words }, 200);
    await call('transcription no file', 'post', stt, sttUrl, { headers: { authorization: `Bearer ${key}` }, body: audioForm('json', false) }, 400);
    await call('transcription json body', 'post', stt, sttUrl, json(key, { model: 'openai/whisper-large-v3' }), 415);
    await call('transcription no key', 'post', stt, sttUrl, { body: audioForm() }, 401);
    gw.sim.providers.scaleway?.setFault({ kind: 'status', status: 500, endpoints: ['transcriptions'], times: 3 });
    await call('transcription upstream 5xx', 'post', stt, sttUrl, { headers: { authorization: `Bearer ${key}` }, body: audioForm() }, 502);
    resetProviders(gw.sim);

    // Routes whose capability has not shipped: 501 for a key, 401 without one.
    for (const [method, path, url] of [
      ['post', '/files', '/files'],
      ['get', '/files', '/files'],
      ['get', '/files/{id}', '/files/f1'],
      ['delete', '/files/{id}', '/files/f1'],
      ['post', '/batches', '/batches'],
      ['get', '/batches', '/batches'],
      ['get', '/batches/{id}', '/batches/b1'],
      ['post', '/batches/{id}/cancel', '/batches/b1/cancel'],
      ['post', '/webhooks', '/webhooks'],
      ['get', '/webhooks', '/webhooks'],
      ['get', '/usage', '/usage'],
      ['get', '/usage/summary', '/usage/summary'],
    ] as const) {
      const init = method === 'post' ? json(key, {}) : get(key);
      await call(`${method} ${path}`, method, p(path), `${base}${url}`, init, 501);
      await call(`${method} ${path} no key`, method, p(path), `${base}${url}`, method === 'post' ? json(null, {}) : get(null), 401);
      // Counted against the key's limit like any request (docs/errors.md): over it, the 429 rather than the 501.
      const once = await gw.createKey({ rateLimitRpm: 1 });
      const limited = (k: string) => (method === 'post' ? json(k, {}) : get(k));
      await call(`${method} ${path} within limit`, method, p(path), `${base}${url}`, limited(once.key), 501);
      await call(`${method} ${path} over limit`, method, p(path), `${base}${url}`, limited(once.key), 429);
    }

    // A method the path does not have, and a path with no route, answer in the variant's error envelope.
    const range = doc.paths[chat]?.post?.responses['4XX'];
    const envelope = range?.content?.['application/json']?.schema as Schema;
    for (const [label, url, method, status] of [
      ['405', chatUrl, 'GET', 405],
      ['404 route', `${base}/nope`, 'GET', 404],
    ] as const) {
      const res = await fetch(url, { method, headers: { authorization: `Bearer ${key}` } });
      const body = (await res.json()) as unknown;
      if (res.status !== status || !validator(envelope)(body)) problems.push(`${variant} ${label}: ${res.status} ${JSON.stringify(body)}`);
      // The 405's Allow, which the range's description names, is one of the range's headers.
      if (res.headers.has('allow') && !range?.headers?.['Allow'])
        problems.push(`${variant} ${label}: header allow: ${res.headers.get('allow')} sent, not documented`);
    }
  });

  it.each(VARIANTS)(
    'variant %s: every error status a routed operation lists, and the models and pending routes',
    async (variant, mount) => {
      resetProviders(gw.sim);
      const isA = variant === 'A';
      const { key } = await gw.createKey({ rateLimitRpm: 10_000 });
      const broke = await gw.createKey({ budget: 1e-12, rateLimitRpm: 10_000 });
      const call = async (label: string, path: string, init: RequestInit, status: number) =>
        conform(`${variant} ${label}`, await fetch(`${gw.url}${path}`, { method: 'POST', ...init }), 'post', path, status);
      const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
      const audio = (k: string, model: string, headers: Record<string, string> = {}, format?: string) => ({
        headers: { authorization: `Bearer ${k}`, ...headers },
        body: audioForm(format, true, model),
      });
      // Each routed operation: its model, the one provider serving it, and a request of it (`n` makes a different one).
      const routes = [
        ['embeddings', `${mount}/v1/embeddings`, 'mistral/embed', 'mistral', 'embeddings'],
        ['rerank', `${mount}/v1/rerank`, 'cohere/rerank-v3.5', 'cohere', 'rerank'],
        ['rerank v2', `${mount}/v2/rerank`, 'cohere/rerank-v3.5', 'cohere', 'rerank'],
        ['transcription', `${mount}/v1/audio/transcriptions`, 'openai/whisper-large-v3', 'scaleway', 'transcriptions'],
      ] as const;
      for (const [name, path, model, providerId, endpoint] of routes) {
        const provider = gw.sim.providers[providerId];
        const request = (k: string, m = model, headers: Record<string, string> = {}, n = 0): RequestInit =>
          name === 'transcription'
            ? audio(k, m, headers, n === 0 ? undefined : 'text')
            : json(k, name === 'embeddings' ? { model: m, input: `a${n}` } : { model: m, query: `q${n}`, documents: ['a', 'b'] }, headers);
        await call(`${name} over budget`, path, request(broke.key), 402);
        await call(`${name} unknown model`, path, request(key, 'nope/nope'), isA ? 404 : 400);
        await call(`${name} retired model`, path, request(key, `${model}-retired`), isA ? 410 : 400);
        const tooLarge =
          name === 'transcription'
            ? {
                headers: { authorization: `Bearer ${key}` },
                body: audioForm(undefined, true, model, new Blob([new Uint8Array(70_000)], { type: 'audio/wav' })),
              }
            : json(key, { model, input: 'x'.repeat(70_000), query: 'q', documents: ['a'] });
        await call(`${name} too large`, path, tooLarge, 413);
        const notItsType =
          name === 'transcription' ? json(key, { model }) : { headers: { authorization: `Bearer ${key}`, 'content-type': 'text/plain' }, body: 'a' };
        await call(`${name} not its media type`, path, notItsType, 415);
        // A repeat while the first runs (409), then the key with another request (422).
        const idem = { 'X-Idempotency-Key': `conformance-${name}-${variant}` };
        provider?.setFault({ kind: 'latency', ms: 300, times: 1, endpoints: [endpoint] });
        const running = fetch(`${gw.url}${path}`, { method: 'POST', ...request(key, model, idem) });
        await sleep(100);
        await call(`${name} idempotent busy`, path, request(key, model, idem), 409);
        await conform(`${variant} ${name} idempotent first`, await running, 'post', path, 200);
        await call(`${name} idempotent other request`, path, request(key, model, idem, 1), 422);
        const slow = await gw.createKey({ rateLimitRpm: 1 });
        await call(`${name} within limit`, path, request(slow.key), 200);
        await call(`${name} over limit`, path, request(slow.key), 429);
        // The provider times out (504), fails (502, its circuit now open), then is not tried at all (A 503, B 502).
        provider?.setFault({ kind: 'hang', times: 1, endpoints: [endpoint] });
        await call(`${name} upstream timeout`, path, request(key), 504);
        provider?.setFault({ kind: 'status', status: 500, endpoints: [endpoint] });
        await call(`${name} upstream 5xx`, path, request(key), 502);
        await call(`${name} no healthy provider`, path, request(key), isA ? 503 : 502);
        resetProviders(gw.sim);
        await sleep(350);
      }

      // Models: a bad percent-escape, the slashed form's 401 and 410.
      const models = async (label: string, path: string, url: string, k: string | null, status: number) =>
        conform(`${variant} ${label}`, await fetch(`${gw.url}${mount}/v1${url}`, get(k)), 'get', `${mount}/v1${path}`, status);
      await models('model bad escape', '/models/{id}', '/models/%ZZ', key, 400);
      await models('model slashed bad escape', '/models/{family}/{model}', '/models/%ZZ/x', key, 400);
      await models('model slashed no key', '/models/{family}/{model}', '/models/mistral/small', null, 401);
      await models('model retired', '/models/{id}', '/models/mistral%2Fnemo', key, isA ? 410 : 400);
      await models('model slashed retired', '/models/{family}/{model}', '/models/mistral/nemo', key, isA ? 410 : 400);
      // Routes still to come: a bad escape in the id is a 400.
      for (const [method, path, url] of [
        ['get', '/files/{id}', '/files/%ZZ'],
        ['delete', '/files/{id}', '/files/%ZZ'],
        ['get', '/batches/{id}', '/batches/%ZZ'],
        ['post', '/batches/{id}/cancel', '/batches/%ZZ/cancel'],
      ] as const) {
        const res = await fetch(`${gw.url}${mount}/v1${url}`, { method: method.toUpperCase(), ...get(key) });
        await conform(`${variant} ${method} ${path} bad escape`, res, method, `${mount}/v1${path}`, 400);
      }
    },
    60_000,
  );

  it('a body not received in time is a 408, on every operation that lists it', async () => {
    const { key } = await gw.createKey({ rateLimitRpm: 10_000 });
    const port = Number(new URL(gw.url).port);
    const stalled = Object.entries(doc.paths).flatMap(([path, item]) =>
      Object.entries(item)
        .filter(([, op]) => op.responses['408'])
        .map(([method]) => [method, path] as const),
    );
    expect(stalled.length).toBeGreaterThan(10);
    await Promise.all(
      stalled.map(async ([method, path]) => {
        const url = path.replaceAll(/\{[^}]+\}/g, 'x');
        const auth = path.startsWith('/admin/') ? ADMIN_TOKEN : key;
        const type = path.endsWith('/transcriptions') ? 'multipart/form-data; boundary=x' : 'application/json';
        const head = `${method.toUpperCase()} ${url} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${auth}\r\nContent-Type: ${type}\r\nContent-Length: 1000\r\n\r\n{`;
        await conform(`408`, await rawAnswer(port, head), method, path, 408);
      }),
    );
  }, 20_000);

  it('the admin API', async () => {
    const admin = `${gw.url}/admin/v1`;
    const auth = { authorization: `Bearer ${ADMIN_TOKEN}` };
    const call = async (label: string, method: string, path: string, url: string, body: unknown, status: number, headers: Record<string, string> = auth) =>
      conform(
        `admin ${label}`,
        await fetch(`${admin}${url}`, {
          method: method.toUpperCase(),
          headers: { ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
          ...(body === undefined ? {} : { body: typeof body === 'string' ? body : JSON.stringify(body) }),
        }),
        method,
        `/admin/v1${path}`,
        status,
      );
    const ws = (await call('create workspace', 'post', '/workspaces', '/workspaces', { name: 'w', budget: 5, enabledModels: ['mistral/small'] }, 201)) as {
      id: string;
    };
    await call('create workspace bad', 'post', '/workspaces', '/workspaces', { name: 5 }, 400);
    await call('create workspace no token', 'post', '/workspaces', '/workspaces', { name: 'w' }, 401, {});
    await call('workspaces', 'get', '/workspaces', '/workspaces?limit=1', undefined, 200);
    await call('workspaces bad limit', 'get', '/workspaces', '/workspaces?limit=0', undefined, 400);
    await call('workspace', 'get', '/workspaces/{id}', `/workspaces/${ws.id}`, undefined, 200);
    await call('workspace unknown', 'get', '/workspaces/{id}', '/workspaces/nope', undefined, 404);
    await call('patch workspace', 'patch', '/workspaces/{id}', `/workspaces/${ws.id}`, { budget: null, enabledModels: null }, 200);
    await call('patch workspace bad', 'patch', '/workspaces/{id}', `/workspaces/${ws.id}`, { budget: 'x' }, 400);
    await call('patch workspace unknown', 'patch', '/workspaces/{id}', '/workspaces/nope', { name: 'x' }, 404);

    const created = (await call('create key', 'post', '/keys', '/keys', { name: 'k', workspaceId: ws.id, budget: 1, rateLimitRpm: 60 }, 201)) as { id: string };
    await call('create key plain', 'post', '/keys', '/keys', {}, 201);
    await call('create key bad', 'post', '/keys', '/keys', { rateLimitRpm: -1 }, 400);
    await call('create key bad json', 'post', '/keys', '/keys', '{', 400);
    await call('create key not json', 'post', '/keys', '/keys', undefined, 415, { ...auth, 'content-type': 'text/plain' });
    await call('create key unknown workspace', 'post', '/keys', '/keys', { workspaceId: 'nope' }, 400);
    await call('keys', 'get', '/keys', '/keys', undefined, 200);
    await call('keys of workspace', 'get', '/keys', `/keys?workspaceId=${ws.id}&limit=5`, undefined, 200);
    await call('keys bad limit', 'get', '/keys', '/keys?limit=500', undefined, 400);
    await call('keys no token', 'get', '/keys', '/keys', undefined, 401, { authorization: 'Bearer wrong-token-0123456789' });
    await call('key', 'get', '/keys/{id}', `/keys/${created.id}`, undefined, 200);
    await call('key unknown', 'get', '/keys/{id}', '/keys/nope', undefined, 404);
    await call('patch key', 'patch', '/keys/{id}', `/keys/${created.id}`, { rateLimitRpm: 120, budget: null }, 200);
    await call('patch key bad', 'patch', '/keys/{id}', `/keys/${created.id}`, { rateLimitRpm: 'x' }, 400);
    await call('patch key unknown', 'patch', '/keys/{id}', '/keys/nope', { rateLimitRpm: 1 }, 404);
    await call('revoke key', 'post', '/keys/{id}/revoke', `/keys/${created.id}/revoke`, undefined, 200);
    await call('patch key revoked', 'patch', '/keys/{id}', `/keys/${created.id}`, { budget: 2 }, 409);
    await call('revoke key unknown', 'post', '/keys/{id}/revoke', '/keys/nope/revoke', undefined, 404);
    await call('rebuild', 'post', '/registry/rebuild', '/registry/rebuild', undefined, 200);
    await call('rebuild no token', 'post', '/registry/rebuild', '/registry/rebuild', undefined, 401, {});
    // Each operation's error statuses: without the token, a bad escape in its id, a body not JSON, too large, or of another type.
    for (const [path, item] of Object.entries(doc.paths)) {
      if (!path.startsWith('/admin/v1/')) continue;
      for (const [method, op] of Object.entries(item)) {
        const sub = path.slice('/admin/v1'.length);
        const url = sub.replaceAll(/\{[^}]+\}/g, 'x');
        const withBody = method === 'post' || method === 'patch';
        const label = `${method} ${sub}`;
        if (op.responses['401']) await call(`${label} no token`, method, sub, url, withBody ? {} : undefined, 401, {});
        if (sub.includes('{')) await call(`${label} bad escape`, method, sub, sub.replaceAll(/\{[^}]+\}/g, '%ZZ'), withBody ? {} : undefined, 400);
        if (!withBody) continue;
        await call(`${label} bad json`, method, sub, url, '{', 400);
        await call(`${label} too large`, method, sub, url, { name: 'x'.repeat(70_000) }, 413);
        const res = await fetch(`${admin}${url}`, { method: method.toUpperCase(), headers: { ...auth, 'content-type': 'text/plain' }, body: 'a' });
        await conform(`admin ${label} not json`, res, method, path, 415);
      }
    }
    const res = await fetch(`${admin}/keys/${created.id}`, { method: 'DELETE', headers: auth });
    const envelope = doc.paths['/admin/v1/keys']?.post?.responses['4XX']?.content?.['application/json']?.schema as Schema;
    const body = (await res.json()) as unknown;
    if (res.status !== 405 || !validator(envelope)(body)) problems.push(`admin 405: ${res.status} ${JSON.stringify(body)}`);
  });

  it("a draining instance's 503, on every operation", async () => {
    // An instance of its own, as its drain refuses every request after it; its connections answered once each.
    const draining = await startGateway({ sim: gw.sim });
    const { key } = await draining.createKey();
    const port = Number(new URL(draining.url).port);
    const operations = Object.entries(doc.paths).flatMap(([path, item]) => Object.keys(item).map((method) => [method, path] as const));
    const ready: Promise<void>[] = [];
    let drain = () => {};
    const drained = new Promise<void>((r) => {
      drain = r;
    });
    const answers = operations.map(([method, path]) => {
      const auth = path.startsWith('/admin/') ? ADMIN_TOKEN : key;
      const body = method === 'post' || method === 'patch' ? '\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}' : '\r\n\r\n';
      const head = `${method.toUpperCase()} ${path.replaceAll(/\{[^}]+\}/g, 'x')} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${auth}${body}`;
      return rawAnswer(port, head, (answered) => {
        ready.push(answered);
        return drained;
      });
    });
    await Promise.all(ready);
    // close() marks the instance draining before it returns: every request sent from here on is refused.
    const closing = draining.close();
    drain();
    await Promise.all(answers.map(async (answer, i) => conform('drain', await answer, operations[i]?.[0] ?? '', operations[i]?.[1] ?? '', 503)));
    await closing;
  });

  it('found no mismatch, and exercised every answer the description documents', () => {
    // Each documented answer no request here gives, and why none can.
    const unexercised: [RegExp, string][] = [
      [/ [45]XX$/, 'the ranges stand for the statuses no operation lists (405 and the no-route 404 are checked above; 417 and 431 come before routing)'],
      [/ 500$/, 'a fault in the gateway itself: no request can cause one'],
    ];
    const missing = Object.entries(doc.paths).flatMap(([path, item]) =>
      Object.entries(item).flatMap(([method, op]) =>
        Object.keys(op.responses)
          .map((key) => `${method} ${path} ${key}`)
          .filter((k) => !exercised.has(k) && !unexercised.some(([pattern]) => pattern.test(k))),
      ),
    );
    expect(problems).toEqual([]);
    expect(missing).toEqual([]);
  });
});
