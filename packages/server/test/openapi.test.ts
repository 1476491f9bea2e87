import { readFileSync } from 'node:fs';
import { validate } from '@scalar/openapi-parser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { wav } from './helpers/audio.js';
import { ADMIN_TOKEN, startGateway, type TestGateway } from './helpers/gateway.js';

let gw: TestGateway;
beforeAll(async () => {
  gw = await startGateway();
});
afterAll(() => gw?.close());

const SPEC_ROUTES = [
  'post /v1/chat/completions',
  'post /v1/embeddings',
  'post /v1/rerank',
  'post /v1/audio/transcriptions',
  'get /v1/models',
  'get /v1/models/{id}',
  'post /v1/files',
  'get /v1/files',
  'get /v1/files/{id}',
  'delete /v1/files/{id}',
  'post /v1/batches',
  'get /v1/batches',
  'get /v1/batches/{id}',
  'post /v1/batches/{id}/cancel',
  'post /v1/webhooks',
  'get /v1/webhooks',
  'get /v1/usage',
  'get /v1/usage/summary',
];

describe('OpenAPI 3.1', () => {
  it('is valid, versioned from package.json, identical at both addresses, and lists every SPEC route in both variants', async () => {
    const doc = (await (await fetch(`${gw.url}/openapi.json`)).json()) as {
      openapi: string;
      info: { version: string };
      paths: Record<string, Record<string, unknown>>;
    };
    const copy = await (await fetch(`${gw.url}/dashboard/openapi.json`)).json();
    expect(copy).toEqual(doc);
    expect(doc.openapi).toBe('3.1.0');
    const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string };
    expect(doc.info.version).toBe(pkg.version);
    const result = await validate(doc);
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
    const have = new Set(Object.entries(doc.paths).flatMap(([path, ops]) => Object.keys(ops).map((m) => `${m} ${path}`)));
    for (const route of SPEC_ROUTES) {
      expect(have, route).toContain(route);
      const [method, path] = route.split(' ') as [string, string];
      expect(have, `B ${route}`).toContain(`${method} /alt${path}`);
    }
    expect(have).toContain('post /admin/v1/keys');
    expect(have).not.toContain('get /healthz');
    // Every answer is described: none is left as the generator's "Default Response".
    const generic = Object.entries(doc.paths).flatMap(([path, ops]) =>
      Object.entries(ops as Record<string, { responses?: Record<string, { description?: string }> }>).flatMap(([method, op]) =>
        Object.entries(op.responses ?? {})
          .filter(([, answer]) => answer.description === 'Default Response')
          .map(([status]) => `${method} ${path} ${status}`),
      ),
    );
    expect(generic).toEqual([]);
    const chat = (doc.paths['/v1/chat/completions'] as { post: { responses: Record<string, { description: string }> } }).post;
    expect(chat.responses['200']?.description).toBe('The answer to: chat completion, streaming optional.');
  });

  it('names each operation once, secures the API with a bearer key and the admin API with its token, and gives every error the envelope of its variant with SPEC.md codes', async () => {
    type Res = { content?: Record<string, { schema?: { title?: string; properties?: { error: { properties: { code: { enum?: string[] } } } } } }> };
    type Op = { operationId?: string; security?: unknown; responses: Record<string, Res> };
    const doc = (await (await fetch(`${gw.url}/openapi.json`)).json()) as {
      servers: unknown;
      components: { securitySchemes: Record<string, unknown> };
      paths: Record<string, Record<string, Op>>;
    };
    // Paths are absolute (/v1, /alt/v1, /admin/v1), resolved against wherever the document was fetched from.
    expect(doc.servers).toEqual([{ url: '/' }]);
    expect(doc.components.securitySchemes).toMatchObject({ bearerAuth: { type: 'http', scheme: 'bearer' }, adminToken: { type: 'http', scheme: 'bearer' } });
    const ids: string[] = [];
    const wrong: string[] = [];
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item)) {
        ids.push(op.operationId ?? `(none: ${method} ${path})`);
        const scheme = path.startsWith('/admin/') ? 'adminToken' : 'bearerAuth';
        if (JSON.stringify(op.security) !== JSON.stringify([{ [scheme]: [] }])) wrong.push(`${method} ${path}: security ${JSON.stringify(op.security)}`);
        const envelope = path.startsWith('/alt/') ? 'ErrorB' : 'ErrorA';
        for (const [status, res] of Object.entries(op.responses)) {
          const title = res.content?.['application/json']?.schema?.title;
          if (/^[45]/.test(status) && !title?.startsWith(envelope)) wrong.push(`${method} ${path} ${status}: ${title}`);
        }
      }
    }
    expect(new Set(ids).size, 'operationIds').toBe(ids.length);
    expect(wrong).toEqual([]);
    // SPEC.md's codes (Errors), each at its status on every routed operation of its variant.
    const spec = {
      '/v1': [
        [400, 'validation_error'],
        [401, 'unauthorized'],
        [402, 'budget_exceeded'],
        [404, 'model_not_found'],
        [410, 'model_deprecated'],
        [429, 'rate_limit_exceeded'],
        [502, 'provider_down'],
        [503, 'provider_down'],
        [504, 'upstream_timeout'],
      ],
      '/alt/v1': [
        [400, 'invalid_request'],
        [400, 'model_not_found'],
        [400, 'provider_unsupported'],
        [401, 'invalid_api_key'],
        [402, 'quota_exceeded'],
        [429, 'rate_limited'],
        [502, 'upstream_unavailable'],
        [504, 'upstream_timeout'],
      ],
    } as const;
    for (const [prefix, codes] of Object.entries(spec)) {
      for (const route of ['/chat/completions', '/embeddings', '/rerank', '/audio/transcriptions']) {
        for (const [status, code] of codes) {
          const documented =
            doc.paths[`${prefix}${route}`]?.post?.responses[String(status)]?.content?.['application/json']?.schema?.properties?.error.properties.code.enum;
          expect(documented, `${prefix}${route} ${status}`).toContain(code);
        }
      }
    }
  });

  it('documents as optional a body the route takes none of (POST /admin/v1/keys, every field optional), and as required one with required fields', async () => {
    const doc = (await (await fetch(`${gw.url}/openapi.json`)).json()) as {
      paths: Record<
        string,
        Record<string, { requestBody?: { required?: boolean; content?: Record<string, { schema: { properties: Record<string, { default?: unknown }> } }> } }>
      >;
    };
    const required = (method: string, path: string) => doc.paths[path]?.[method]?.requestBody?.required;
    expect(required('post', '/admin/v1/keys')).toBe(false);
    // As documented: no body at all makes a key, with the documented default limit (INTERFACES.md: 60).
    const res = await fetch(`${gw.url}/admin/v1/keys`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    expect(res.status).toBe(201);
    const rpm = doc.paths['/admin/v1/keys']?.post?.requestBody?.content?.['application/json']?.schema.properties['rateLimitRpm']?.default;
    expect([rpm, ((await res.json()) as { rateLimitRpm: number }).rateLimitRpm]).toEqual([60, 60]);
    for (const [method, path] of [
      ['post', '/admin/v1/workspaces'],
      ['patch', '/admin/v1/keys/{id}'],
      ['patch', '/admin/v1/workspaces/{id}'],
      ['post', '/v1/chat/completions'],
      ['post', '/alt/v1/embeddings'],
    ] as const) {
      expect([method, path, required(method, path)]).toEqual([method, path, true]);
    }
  });

  it("documents a transcription form's lists (languages, keywords, timestamp_granularities) as one part per item, and the gateway takes a form sent so", async () => {
    type Form = {
      schema: { properties: Record<string, { type?: string; format?: string; items?: unknown }> };
      encoding?: Record<string, { style?: string; explode?: boolean }>;
    };
    const doc = (await (await fetch(`${gw.url}/openapi.json`)).json()) as {
      paths: Record<string, { post: { requestBody: { content: Record<string, Form> } } }>;
    };
    const { key } = await gw.createKey({ rateLimitRpm: 1000 });
    for (const [prefix, base] of [
      ['/v1', gw.baseA],
      ['/alt/v1', gw.baseB],
    ] as const) {
      const form = doc.paths[`${prefix}/audio/transcriptions`]?.post.requestBody.content['multipart/form-data'] as Form;
      const lists = Object.entries(form.schema.properties)
        .filter(([, p]) => p.type === 'array')
        .map(([name]) => name);
      expect(lists.sort(), prefix).toEqual(['keywords', 'languages', 'timestamp_granularities']);
      for (const name of lists) expect([name, form.encoding?.[name]], prefix).toEqual([name, { style: 'form', explode: true }]);
      expect(form.schema.properties['file']?.format, prefix).toBe('binary');
      // As a client generated from the document sends it: each item of an exploded list its own part, under the property's name.
      const values: Record<string, string | string[]> = {
        model: 'mistral/voxtral-mini',
        response_format: 'verbose_json',
        languages: ['de'],
        keywords: ['Quillara', 'Alder Creek Design'],
      };
      const body = new FormData();
      body.set('file', new Blob([wav(1)], { type: 'audio/wav' }), 'a.wav');
      for (const [name, value] of Object.entries(values)) {
        for (const item of Array.isArray(value) && form.encoding?.[name]?.explode ? value : [String(value)]) body.append(name, item);
      }
      const res = await fetch(`${base}/audio/transcriptions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'X-Gateway-Provider': 'mistral' },
        body,
      });
      expect([prefix, res.status, ((await res.json()) as { language?: string }).language]).toEqual([prefix, 200, 'german']);
      const fields = (gw.sim.providers.mistral?.stats().last?.body as { fields?: Record<string, string[]> } | undefined)?.fields ?? {};
      expect([fields['language'], fields['context_bias']], prefix).toEqual([['de'], ['Quillara', 'Alder Creek Design']]);
    }
  });

  it('documents each variant with its own error codes', async () => {
    const doc = (await (await fetch(`${gw.url}/openapi.json`)).json()) as {
      paths: Record<string, Record<string, { responses: Record<string, { content: Record<string, { schema: unknown }> }> }>>;
    };
    const a = JSON.stringify(doc.paths['/v1/chat/completions']?.post?.responses['4XX']);
    const b = JSON.stringify(doc.paths['/alt/v1/chat/completions']?.post?.responses['4XX']);
    expect(a).toContain('validation_error');
    expect(a).not.toContain('invalid_request');
    expect(b).toContain('invalid_request');
    expect(b).toContain('provider_unsupported');
    // The admin API's errors (in A's envelope) are documented as well.
    for (const [path, method] of [
      ['/admin/v1/keys', 'post'],
      ['/admin/v1/keys/{id}', 'get'],
      ['/admin/v1/keys/{id}', 'patch'],
    ] as const) {
      const responses = doc.paths[path]?.[method]?.responses ?? {};
      expect(Object.keys(responses), `${method} ${path}`).toEqual(expect.arrayContaining(['4XX', '5XX']));
      expect(JSON.stringify(responses['4XX'])).toContain('not_found');
    }
  });

  it('documents the request headers of SPEC.md and the headers each variant answers with, as the gateway sends them', async () => {
    type Op = { parameters?: { in: string; name: string }[]; responses: Record<string, { headers?: Record<string, unknown> }> };
    const doc = (await (await fetch(`${gw.url}/openapi.json`)).json()) as { paths: Record<string, Record<string, Op>> };
    const { key } = await gw.createKey();
    for (const [variant, base, path] of [
      ['a', gw.baseA, '/v1/chat/completions'],
      ['b', gw.baseB, '/alt/v1/chat/completions'],
    ] as const) {
      const op = doc.paths[path]?.post as Op;
      const params = (op.parameters ?? []).filter((p) => p.in === 'header').map((p) => p.name);
      expect(params).toEqual(
        expect.arrayContaining([
          'X-Gateway-Strategy',
          'X-Gateway-Provider',
          'X-Gateway-Provider-Prefer',
          'X-Gateway-Max-Hops',
          'X-Idempotency-Key',
          'Last-Event-ID',
        ]),
      );
      const documented = Object.keys(op.responses['200']?.headers ?? {}).map((h) => h.toLowerCase());
      const res = await fetch(`${base}/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'hi' }] }),
      });
      expect(res.status).toBe(200);
      await res.text();
      // Every documented header is really sent, and every routing or limit header sent is documented.
      // X-Accel-Buffering is an event stream's alone, Idempotent-Replayed a repeat's.
      for (const h of documented.filter((h) => h !== 'x-accel-buffering' && h !== 'idempotent-replayed'))
        expect(res.headers.has(h), `${variant}: ${h}`).toBe(true);
      const sent = [...res.headers.keys()].filter((h) => /^x-(gateway|ratelimit|request)-/.test(h));
      expect(documented, variant).toEqual(expect.arrayContaining(sent));
    }
    // Models are listed, not routed: no routing headers there; nor limit headers, as the list is not counted.
    const models = doc.paths['/v1/models']?.get as Op;
    expect(models.parameters ?? []).not.toContainEqual(expect.objectContaining({ name: 'X-Gateway-Strategy' }));
    expect(Object.keys(models.responses['200']?.headers ?? {})).toEqual(['X-Request-Id']);
    const listed = await fetch(`${gw.baseA}/models`, { headers: { authorization: `Bearer ${key}` } });
    expect([...listed.headers.keys()].filter((h) => h.startsWith('x-ratelimit-'))).toEqual([]);
  });

  it('documents every answer a route gives: a transcription, and a chat completion as an event stream', async () => {
    type Answer = { content?: Record<string, unknown>; headers?: Record<string, unknown> };
    const doc = (await (await fetch(`${gw.url}/openapi.json`)).json()) as { paths: Record<string, Record<string, { responses: Record<string, Answer> }>> };
    for (const prefix of ['/v1', '/alt/v1']) {
      const transcription = doc.paths[`${prefix}/audio/transcriptions`]?.post?.responses['200'];
      expect(Object.keys(transcription?.content ?? {}).sort(), prefix).toEqual(['application/json', 'text/plain', 'text/vtt']);
      expect(Object.keys(transcription?.headers ?? {}), prefix).toContain('X-Gateway-Provider');
      // json and verbose_json typed field by field, not only their text.
      const transcript = (transcription?.content?.['application/json'] as { schema?: { properties?: object } } | undefined)?.schema?.properties ?? {};
      expect(Object.keys(transcript), prefix).toEqual(['text', 'usage', 'task', 'language', 'duration', 'segments', 'words']);
      const chat = doc.paths[`${prefix}/chat/completions`]?.post?.responses['200'];
      expect(Object.keys(chat?.content ?? {}).sort(), prefix).toEqual(['application/json', 'text/event-stream']);
    }
    // Every response_format answers with a content type the document lists.
    const { key } = await gw.createKey({ rateLimitRpm: 1000 });
    const documented = Object.keys(doc.paths['/v1/audio/transcriptions']?.post?.responses['200']?.content ?? {});
    for (const format of ['json', 'verbose_json', 'text', 'srt', 'vtt']) {
      const form = new FormData();
      form.set('file', new Blob([wav(1)], { type: 'audio/wav' }), 'a.wav');
      form.set('model', 'openai/whisper-large-v3');
      form.set('response_format', format);
      const res = await fetch(`${gw.baseA}/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: form });
      await res.arrayBuffer();
      expect([format, res.status, documented.includes(res.headers.get('content-type')?.split(';')[0] ?? '')]).toEqual([format, 200, true]);
    }
    // Each variant its own headers: B's routing headers are not on A's transcription.
    expect(Object.keys(doc.paths['/v1/audio/transcriptions']?.post?.responses['200']?.headers ?? {})).not.toContain('X-Gateway-Region');
    expect(Object.keys(doc.paths['/alt/v1/audio/transcriptions']?.post?.responses['200']?.headers ?? {})).toContain('X-Gateway-Region');
  });

  it("documents the v2 rerank mount's headers, and what every error answer carries", async () => {
    type Res = { description?: string; headers?: Record<string, { schema?: { type?: string } }> };
    const doc = (await (await fetch(`${gw.url}/openapi.json`)).json()) as {
      paths: Record<string, Record<string, { parameters?: { name: string }[]; responses: Record<string, Res> }>>;
    };
    // /v2/rerank is routed and limited like /v1/rerank: the same parameters and answer headers.
    for (const [path, region] of [
      ['/v2/rerank', false],
      ['/alt/v2/rerank', true],
    ] as const) {
      const op = doc.paths[path]?.post;
      expect(
        op?.parameters?.map((p) => p.name),
        path,
      ).toEqual(expect.arrayContaining(['X-Gateway-Strategy', 'X-Gateway-Provider', 'X-Idempotency-Key']));
      const ok = Object.keys(op?.responses['200']?.headers ?? {});
      expect(ok, path).toEqual(expect.arrayContaining(['X-Request-Id', 'X-RateLimit-Limit', 'X-Gateway-Provider']));
      expect(ok.includes('X-Gateway-Region'), path).toBe(region);
    }
    // Every public error response says what it is and documents X-Request-Id and Retry-After (429, 409, 503).
    for (const [path, item] of Object.entries(doc.paths)) {
      if (!/^\/(alt\/)?v[12]\//.test(path)) continue;
      for (const [method, op] of Object.entries(item)) {
        for (const range of ['4XX', '5XX']) {
          const failed = op.responses[range];
          expect(failed?.description, `${method} ${path} ${range}`).not.toBe('Default Response');
          expect(Object.keys(failed?.headers ?? {}), `${method} ${path} ${range}`).toEqual(expect.arrayContaining(['X-Request-Id', 'Retry-After']));
        }
      }
    }
    const limitedError = Object.keys(doc.paths['/alt/v1/chat/completions']?.post?.responses['4XX']?.headers ?? {});
    expect(limitedError).toContain('X-RateLimit-Remaining');
    expect(Object.keys(doc.paths['/v1/models']?.get?.responses['4XX']?.headers ?? {})).not.toContain('X-RateLimit-Remaining');
  });

  it('lists each error status an operation gives, its code narrowed to what that status carries in the variant, and the headers always sent as required', async () => {
    type Header = { required?: boolean };
    type Res = {
      description?: string;
      headers?: Record<string, Header>;
      content?: Record<string, { schema: { properties: { error: { properties: { code: unknown } } } } }>;
    };
    const doc = (await (await fetch(`${gw.url}/openapi.json`)).json()) as { paths: Record<string, Record<string, { responses: Record<string, Res> }>> };
    const responses = (path: string, method = 'post') => doc.paths[path]?.[method]?.responses ?? {};
    const statuses = (path: string, method = 'post') => Object.keys(responses(path, method)).filter((k) => /^[45]\d\d$/.test(k));
    const codes = (path: string, status: string, method = 'post') =>
      responses(path, method)[status]?.content?.['application/json']?.schema.properties.error.properties.code;
    expect(statuses('/v1/chat/completions')).toEqual(['400', '401', '402', '404', '408', '409', '410', '413', '415', '422', '429', '500', '502', '503', '504']);
    expect(statuses('/alt/v1/chat/completions')).toEqual(['400', '401', '402', '404', '408', '409', '413', '415', '422', '429', '500', '502', '503', '504']);
    expect(codes('/v1/chat/completions', '404')).toEqual({ type: 'string', enum: ['model_not_found', 'stream_not_found'] });
    expect(codes('/v1/chat/completions', '503')).toEqual({ type: 'string', enum: ['service_unavailable', 'provider_down'] });
    expect(codes('/alt/v1/chat/completions', '400')).toEqual({ type: 'string', enum: ['invalid_request', 'provider_unsupported', 'model_not_found'] });
    expect(codes('/alt/v1/embeddings', '404')).toBeUndefined();
    // Each code's condition is named.
    expect(responses('/v1/chat/completions')['410']?.description).toBe('`model_deprecated`: the model is retired upstream.');
    // Models are neither billed nor counted; routes still to come answer before anything but the key and its count.
    expect(statuses('/v1/models', 'get')).toEqual(['400', '401', '500', '503']);
    expect(statuses('/alt/v1/models/{id}', 'get')).toEqual(['400', '401', '500', '503']);
    expect(statuses('/v1/files', 'get')).toEqual(['401', '429', '500', '501', '503']);
    expect(codes('/v1/files', '501', 'get')).toEqual({ type: 'string', enum: ['not_implemented'] });
    // The ranges stay, as the fallback.
    expect(Object.keys(responses('/v1/embeddings'))).toEqual(expect.arrayContaining(['4XX', '5XX']));

    // X-Request-Id on every answer; the limit headers on every success of a counted route and every error given after the count.
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item)) {
        for (const [status, res] of Object.entries(op.responses)) {
          expect(res.headers?.['X-Request-Id']?.required, `${method} ${path} ${status}`).toBe(true);
          if (!status.startsWith('2')) expect(res.description, `${method} ${path} ${status}`).not.toBe('Default Response');
        }
      }
    }
    const limits = ['X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset', 'X-RateLimit-Enforced'];
    const required = (res: Res | undefined) => limits.map((h) => res?.headers?.[h]?.required);
    expect(required(responses('/alt/v1/rerank')['200'])).toEqual([true, true, true, true]);
    expect(required(responses('/v1/chat/completions')['429'])).toEqual([true, true, true, true]);
    expect(required(responses('/v1/chat/completions')['401'])).toEqual([false, false, false, false]);
    expect(required(responses('/alt/v1/batches/{id}/cancel')['501'])).toEqual([true, true, true, true]);
    expect(required(responses('/alt/v1/batches/{id}/cancel')['429'])).toEqual([true, true, true, true]);
    expect(responses('/v1/chat/completions')['429']?.headers?.['Retry-After']?.required).toBe(true);
    // The admin API's errors, each status with its headers.
    expect(statuses('/admin/v1/keys/{id}', 'patch')).toEqual(['400', '401', '404', '408', '409', '413', '415', '500', '503']);
    // A revoked key's 409 has nothing to wait for: no Retry-After, unlike an idempotency key's.
    expect(responses('/admin/v1/keys/{id}', 'patch')['409']?.headers?.['Retry-After']).toBeUndefined();
    expect(responses('/v1/chat/completions')['409']?.headers?.['Retry-After']?.required).toBe(true);
    expect(responses('/admin/v1/keys', 'post')['4XX']?.description).toMatch(/^A refused request, in variant A's error envelope\./);
    expect(responses('/admin/v1/keys', 'get')['503']?.headers?.['Retry-After']?.required).toBe(true);
  });
});

describe('OpenAPI headers of a repeat and a 405', () => {
  it('documents the headers of a repeat with X-Idempotency-Key (its success and its provider refusal) and the Allow of a 405', async () => {
    type Res = { headers?: Record<string, { required?: boolean; schema?: unknown }> };
    const doc = (await (await fetch(`${gw.url}/openapi.json`)).json()) as { paths: Record<string, Record<string, { responses: Record<string, Res> }>> };
    for (const path of ['/v1/chat/completions', '/alt/v1/embeddings', '/v2/rerank', '/alt/v1/audio/transcriptions']) {
      const responses = doc.paths[path]?.post?.responses ?? {};
      for (const status of ['200', '400']) {
        expect([path, status, responses[status]?.headers?.['Idempotent-Replayed']]).toEqual([
          path,
          status,
          expect.objectContaining({ required: false, schema: { type: 'string', enum: ['true'] } }),
        ]);
      }
      expect(Object.keys(responses['4XX']?.headers ?? {}), path).toContain('Allow');
    }
    // Nothing is replayed where nothing reached a provider: the models, the routes still to come.
    expect(doc.paths['/v1/files']?.post?.responses['501']?.headers?.['Idempotent-Replayed']).toBeUndefined();
    expect(doc.paths['/v1/models']?.get?.responses['200']?.headers?.['Idempotent-Replayed']).toBeUndefined();
  });
});

describe('OpenAPI document caching', () => {
  it('serves the same bytes at both addresses with a strong ETag, answers If-None-Match with 304 and no body, and HEAD with the headers alone', async () => {
    const first = await fetch(`${gw.url}/openapi.json`);
    const bytes = Buffer.from(await first.arrayBuffer());
    const etag = first.headers.get('etag');
    expect(etag).toMatch(/^"[\w-]+"$/);
    expect(first.headers.get('cache-control')).toBe('no-cache');
    expect(first.headers.get('content-type')).toBe('application/json; charset=utf-8');
    const copy = await fetch(`${gw.url}/dashboard/openapi.json`);
    expect(Buffer.from(await copy.arrayBuffer()).equals(bytes)).toBe(true);
    expect(copy.headers.get('etag')).toBe(etag);
    for (const tag of [etag as string, `W/${etag}`, `"other", ${etag}`, '*']) {
      const again = await fetch(`${gw.url}/dashboard/openapi.json`, { headers: { 'if-none-match': tag } });
      expect([tag, again.status, (await again.text()).length, again.headers.get('etag')]).toEqual([tag, 304, 0, etag]);
    }
    const changed = await fetch(`${gw.url}/openapi.json`, { headers: { 'if-none-match': '"other"' } });
    expect([changed.status, Buffer.from(await changed.arrayBuffer()).equals(bytes)]).toEqual([200, true]);
    const head = await fetch(`${gw.url}/openapi.json`, { method: 'HEAD' });
    expect([head.status, head.headers.get('etag'), head.headers.get('content-length'), await head.text()]).toEqual([200, etag, String(bytes.length), '']);
  });

  it('answers a HEAD with a matching If-None-Match as a GET: 304 with the 200’s ETag and Cache-Control, and no Content-Length of 0', async () => {
    const whole = await fetch(`${gw.url}/openapi.json`);
    const etag = whole.headers.get('etag') as string;
    await whole.arrayBuffer();
    for (const url of ['/openapi.json', '/dashboard/openapi.json']) {
      for (const method of ['GET', 'HEAD']) {
        const again = await fetch(`${gw.url}${url}`, { method, headers: { 'if-none-match': etag } });
        const seen = [again.headers.get('etag'), again.headers.get('cache-control'), again.headers.get('content-length'), again.headers.get('vary')];
        expect([url, method, again.status, ...seen, await again.text()]).toEqual([url, method, 304, etag, 'no-cache', null, null, '']);
      }
    }
  });
});

describe('OpenAPI chat request', () => {
  it('describes each field the gateway refuses only in the company of another (which a schema cannot say), as the gateway refuses it', async () => {
    type Doc = {
      paths: Record<string, { post: { requestBody: { content: Record<string, { schema: { properties: Record<string, { description?: string }> } }> } } }>;
    };
    const doc = (await (await fetch(`${gw.url}/openapi.json`)).json()) as Doc;
    const { key } = await gw.createKey({ rateLimitRpm: 1000 });
    const refused: [string, Record<string, unknown>][] = [
      ['stream_options', { stream_options: { include_usage: true } }],
      ['tool_choice', { tool_choice: 'required' }],
      ['parallel_tool_calls', { parallel_tool_calls: true }],
      ['top_logprobs', { top_logprobs: 2 }],
    ];
    for (const prefix of ['/v1', '/alt/v1']) {
      const properties = doc.paths[`${prefix}/chat/completions`]?.post.requestBody.content['application/json']?.schema.properties ?? {};
      for (const [field, extra] of refused) {
        const res = await fetch(`${gw.url}${prefix}/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'mistral/small', messages: [{ role: 'user', content: 'hi' }], ...extra }),
        });
        const { error } = (await res.json()) as { error: { param: string } };
        expect([prefix, field, res.status, error.param, properties[field]?.description]).toEqual([
          prefix,
          field,
          400,
          field,
          expect.stringContaining(`400 \`${field}\``),
        ]);
      }
    }
  });
});
