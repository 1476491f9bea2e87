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
  exercised.add(`${method} ${path} ${key}`);
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
  }
  return body;
}

/** An event stream: every `data:` JSON event against the chunk schema the description gives (an error event against the error schema). */
async function checkStream(where: string, res: Response, media: Media): Promise<unknown> {
  const events = await readSse(res);
  if (events.at(-1)?.data !== '[DONE]' && !events.at(-1)?.data.includes('"error"')) problems.push(`${where}: stream ended without [DONE]`);
  const chunk = media['x-event-schema'];
  for (const e of events) {
    if (e.data === '[DONE]') continue;
    if (!chunk) {
      problems.push(`${where}: the event stream has no chunk schema to check its events against`);
      break;
    }
    const v = validator(chunk);
    if (!v(JSON.parse(e.data))) problems.push(`${where}: event ${e.data.slice(0, 300)} does not match: ${ajv.errorsText(v.errors)}`);
  }
  return events;
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

function audioForm(format?: string, withFile = true): FormData {
  const form = new FormData();
  if (withFile) form.set('file', new Blob([wav(1)], { type: 'audio/wav' }), 'a.wav');
  form.set('model', 'openai/whisper-large-v3');
  if (format) form.set('response_format', format);
  return form;
}

beforeAll(async () => {
  gw = await startGateway({
    env: { GW_BODY_LIMIT_BYTES: '65536', GW_CIRCUIT_FAILURES: '2', GW_CIRCUIT_OPEN_MS: '300', GW_IDEMPOTENCY_WAIT_MS: '50' },
    // Azure (openai/gpt-4o-mini's one provider) answers within 400 ms or times out, so a 504 is quick.
    catalogue: (c) => ({ ...c, providers: c.providers.map((p) => (p.id === 'azure' ? { ...p, timeoutMs: 400, connectTimeoutMs: 400 } : p)) }),
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
    await call('chat unknown stream', 'post', chat, chatUrl, json(key, chatBody('mistral/small', { stream: true }), { 'Last-Event-ID': 'nope:1' }), 404);
    const idem = { 'X-Idempotency-Key': `conformance-${variant}` };
    await call('chat idempotent', 'post', chat, chatUrl, json(key, chatBody(), idem), 200);
    await call('chat idempotent replay', 'post', chat, chatUrl, json(key, chatBody(), idem), 200);
    await call('chat idempotent other body', 'post', chat, chatUrl, json(key, chatBody('mistral/large'), idem), 422);
    const streamIdem = { 'X-Idempotency-Key': `conformance-stream-${variant}` };
    await call('chat stream idempotent', 'post', chat, chatUrl, json(key, chatBody('mistral/small', { stream: true }), streamIdem), 200);
    await call('chat stream idempotent replay', 'post', chat, chatUrl, json(key, chatBody('mistral/small', { stream: true }), streamIdem), 200);
    const first = await fetch(chatUrl, json(key, chatBody('mistral/small', { stream: true })));
    const [head] = await readSse(first, 1);
    await call('chat stream resumed', 'post', chat, chatUrl, json(key, chatBody('mistral/small', { stream: true }), { 'Last-Event-ID': head?.id ?? '' }), 200);
    // A repeat while the first is still running: 409 once GW_IDEMPOTENCY_WAIT_MS has passed.
    gw.sim.providers.scaleway?.setFault({ kind: 'latency', ms: 600, times: 1 });
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

    // Upstream failures, of a model with one provider.
    const [lone, upstream] = ['openai/gpt-4o-mini', gw.sim.providers.azure] as const;
    upstream?.setFault({ kind: 'hang', times: 1 });
    await call('chat upstream timeout', 'post', chat, chatUrl, json(key, chatBody(lone)), 504);
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
    gw.sim.providers.mistral?.setFault({ kind: 'status', status: 503, endpoints: ['embeddings'], times: 3 });
    await call('embeddings upstream 5xx', 'post', emb, `${base}/embeddings`, json(key, { model: 'mistral/embed', input: 'a' }), 502);
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
    }

    // A method the path does not have, and a path with no route, answer in the variant's error envelope.
    const envelope = doc.paths[chat]?.post?.responses['4XX']?.content?.['application/json']?.schema as Schema;
    for (const [label, url, method, status] of [
      ['405', chatUrl, 'GET', 405],
      ['404 route', `${base}/nope`, 'GET', 404],
    ] as const) {
      const res = await fetch(url, { method, headers: { authorization: `Bearer ${key}` } });
      const body = (await res.json()) as unknown;
      if (res.status !== status || !validator(envelope)(body)) problems.push(`${variant} ${label}: ${res.status} ${JSON.stringify(body)}`);
    }
  });

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
    await call('revoke key unknown', 'post', '/keys/{id}/revoke', '/keys/nope/revoke', undefined, 404);
    await call('rebuild', 'post', '/registry/rebuild', '/registry/rebuild', undefined, 200);
    await call('rebuild no token', 'post', '/registry/rebuild', '/registry/rebuild', undefined, 401, {});
    const res = await fetch(`${admin}/keys/${created.id}`, { method: 'DELETE', headers: auth });
    const envelope = doc.paths['/admin/v1/keys']?.post?.responses['4XX']?.content?.['application/json']?.schema as Schema;
    const body = (await res.json()) as unknown;
    if (res.status !== 405 || !validator(envelope)(body)) problems.push(`admin 405: ${res.status} ${JSON.stringify(body)}`);
  });

  it('found no mismatch, and exercised every answer the description documents', () => {
    // 5XX of routes that only a gateway fault or an unreachable store can cause, which a test gateway cannot be made to give here.
    const unreachable = (op: string) => / 5XX$/.test(op) && (/^\w+ \/admin\//.test(op) || /\/models/.test(op));
    const missing = Object.entries(doc.paths).flatMap(([path, item]) =>
      Object.entries(item).flatMap(([method, op]) =>
        Object.keys(op.responses)
          .map((key) => `${method} ${path} ${key}`)
          .filter((k) => !exercised.has(k) && !unreachable(k)),
      ),
    );
    expect(problems).toEqual([]);
    expect(missing).toEqual([]);
  });
});
