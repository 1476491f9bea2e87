import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN, startGateway, type TestGateway } from './helpers/gateway.js';

let gw: TestGateway;
beforeAll(async () => {
  gw = await startGateway();
});
afterAll(() => gw?.close());

describe('admin API', () => {
  it('creates workspaces and keys exactly as INTERFACES.md shows', async () => {
    const ws = await gw.admin<Record<string, unknown>>('POST', '/workspaces', { name: 'acme', enabledModels: ['mistral/small'], budget: 25 });
    expect(ws.status).toBe(201);
    expect(ws.body).toMatchObject({ name: 'acme', enabledModels: ['mistral/small'], budget: 25 });
    expect(ws.body.id).toMatch(/^ws_/);
    const created = await gw.admin<Record<string, unknown>>('POST', '/keys', { name: 'ci', workspaceId: ws.body.id });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ name: 'ci', workspaceId: ws.body.id, rateLimitRpm: 60, budget: null });
    expect(created.body.key).toMatch(/^gw_live_[A-Za-z0-9_-]{43}$/);
    const got = await gw.admin<Record<string, unknown>>('GET', `/keys/${created.body.id}`);
    expect(got.body).toEqual({ id: created.body.id, name: 'ci', workspaceId: ws.body.id, rateLimitRpm: 60, budget: null, spent: 0, revoked: false });
    expect(JSON.stringify(got.body)).not.toContain(created.body.key as string);
    const patched = await gw.admin<Record<string, unknown>>('PATCH', `/keys/${created.body.id}`, { rateLimitRpm: 600, budget: 5.5 });
    expect(patched.body).toMatchObject({ rateLimitRpm: 600, budget: 5.5 });
    const revoked = await gw.admin<Record<string, unknown>>('POST', `/keys/${created.body.id}/revoke`);
    expect(revoked.body).toMatchObject({ revoked: true });
  });

  it('creates a key with name and workspaceId null, the nulls its answers show for none, as if they were left out', async () => {
    const created = await gw.admin<Record<string, unknown>>('POST', '/keys', { name: null, workspaceId: null, budget: null });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ name: null, workspaceId: null, rateLimitRpm: 60, budget: null });
    const got = await gw.admin<Record<string, unknown>>('GET', `/keys/${created.body.id}`);
    expect(got.body).toMatchObject({ name: null, workspaceId: null, revoked: false });
    const res = await fetch(`${gw.baseA}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${created.body.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mistral/small', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 }),
    });
    expect(res.status).toBe(200);
  });

  it('answers a method an admin path does not take with 405 and Allow, as the public API does, and an unknown path with 404', async () => {
    for (const [method, path, allow] of [
      ['DELETE', '/workspaces', 'GET, HEAD, POST'],
      ['GET', '/registry/rebuild', 'POST'],
      ['DELETE', '/keys/key_x', 'GET, HEAD, PATCH'],
    ] as const) {
      const res = await fetch(`${gw.url}/admin/v1${path}`, { method, headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
      const body = (await res.json()) as { error: { code: string } };
      expect([method, path, res.status, body.error.code, res.headers.get('allow')]).toEqual([method, path, 405, 'method_not_allowed', allow]);
    }
    const none = await gw.admin<{ error: { code: string } }>('GET', '/nothing');
    expect([none.status, none.body.error.code]).toEqual([404, 'not_found']);
  });

  it('a path off only by a trailing or doubled slash or its letter case is a 404 naming the route meant, as on the public API', async () => {
    for (const [method, path, meant] of [
      ['GET', '/keys/', '/admin/v1/keys'],
      ['POST', '/keys/', '/admin/v1/keys'],
      ['GET', '/workspaces/', '/admin/v1/workspaces'],
      ['POST', '/workspaces/?x=1', '/admin/v1/workspaces'],
      ['GET', '//keys', '/admin/v1/keys'],
      ['GET', '/Workspaces', '/admin/v1/workspaces'],
      ['POST', '/keys/key_x/revoke/', '/admin/v1/keys/key_x/revoke'],
      ['POST', '/registry/rebuild/', '/admin/v1/registry/rebuild'],
      // No route takes these methods at /keys either: the path is still the slip, not a 405 naming the item's methods.
      ['DELETE', '/keys/', '/admin/v1/keys'],
      ['PATCH', '/keys/', '/admin/v1/keys'],
      ['PUT', '/workspaces/', '/admin/v1/workspaces'],
    ] as const) {
      const res = await fetch(`${gw.url}/admin/v1${path}`, { method, headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
      const { error } = (await res.json()) as { error: { code: string; type: string; message: string } };
      const shown = `/admin/v1${path.split('?')[0]}`;
      expect([method, path, res.status, error.code, error.type, res.headers.get('allow'), error.message]).toEqual([
        method,
        path,
        404,
        'not_found',
        'not_found',
        null,
        `No admin route ${method} ${shown}. Did you mean ${meant}? Paths are matched as written: in lower case, without doubled or trailing slashes.`,
      ]);
    }
    // Without a route meant, a plain 404; without the admin token, the 401 comes first.
    expect((await gw.admin<{ error: { message: string } }>('GET', '/nothing/')).body.error.message).toBe('No admin route GET /admin/v1/nothing/.');
    expect((await fetch(`${gw.url}/admin/v1/keys/`)).status).toBe(401);
  });

  it('refuses enabledModels naming a model the registry does not know, and stores an alias as the model id', async () => {
    const typo = await gw.admin<{ error: { code: string; param: string; message: string } }>('POST', '/workspaces', {
      name: 'typo',
      enabledModels: ['mistral/small', 'mistral/smal', 'nope/x'],
    });
    expect([typo.status, typo.body.error.code, typo.body.error.param]).toEqual([400, 'validation_error', 'enabledModels']);
    expect(typo.body.error.message).toContain("'mistral/smal', 'nope/x'");
    const alias = await gw.admin<{ enabledModels: string[] }>('POST', '/workspaces', { name: 'alias', enabledModels: ['mistral/small:eu', 'mistral/small'] });
    expect([alias.status, alias.body.enabledModels]).toEqual([201, ['mistral/small']]);
  });

  it('refuses a budget the store cannot hold with a 400 naming it, not a 500', async () => {
    for (const [path, body] of [
      ['/keys', { budget: 1e12 }],
      ['/workspaces', { name: 'huge', budget: 1e308 }],
    ] as const) {
      const res = await gw.admin<{ error: { code: string; param: string } }>('POST', path, body);
      expect([path, res.status, res.body.error.code, res.body.error.param]).toEqual([path, 400, 'validation_error', 'budget']);
    }
    const { id } = await gw.createKey();
    const patched = await gw.admin<{ error: { code: string } }>('PATCH', `/keys/${id}`, { budget: 5e12 });
    expect([patched.status, patched.body.error.code]).toEqual([400, 'validation_error']);
    expect((await gw.admin('POST', '/keys', { budget: 999_999_999_999 })).status).toBe(201);
    // Below the store's 1e-12 EUR it would be stored as 0: a key that can spend nothing, without saying so.
    for (const [method, path, body] of [
      ['POST', '/keys', { budget: 4e-13 }],
      ['POST', '/workspaces', { name: 'tiny', budget: 1e-15 }],
      ['PATCH', `/keys/${id}`, { budget: 9.9e-13 }],
    ] as const) {
      const res = await gw.admin<{ error: { code: string; param: string; message: string } }>(method, path, body);
      expect([path, res.status, res.body.error.code, res.body.error.param]).toEqual([path, 400, 'validation_error', 'budget']);
      expect(res.body.error.message).toContain('smallest amount stored');
    }
    const smallest = await gw.admin<{ budget: number }>('POST', '/keys', { budget: 1e-12 });
    expect([smallest.status, smallest.body.budget]).toEqual([201, 1e-12]);
  });

  it('refuses a NUL character, which the store cannot hold, with a 400 naming the field (a 404 in an id), not a 500', async () => {
    for (const [path, body, param] of [
      ['/keys', { name: 'a\u0000b' }, 'name'],
      ['/workspaces', { name: 'a\u0000b' }, 'name'],
      ['/keys', { workspaceId: 'ws\u0000' }, 'workspaceId'],
      ['/workspaces', { name: 'w', enabledModels: ['mistral/small\u0000'] }, 'enabledModels.0'],
    ] as const) {
      const res = await gw.admin<{ error: { code: string; param: string } }>('POST', path, body);
      expect([path, res.status, res.body.error.code, res.body.error.param]).toEqual([path, 400, 'validation_error', param]);
    }
    const byId = await gw.admin<{ error: { code: string } }>('GET', '/keys/key%00x');
    expect([byId.status, byId.body.error.code]).toEqual([404, 'not_found']);
    const patched = await gw.admin<{ error: { code: string } }>('PATCH', '/keys/key%00x', { rateLimitRpm: 5 });
    expect([patched.status, patched.body.error.code]).toEqual([404, 'not_found']);
    for (const [path, param] of [
      ['/keys?after=key%00x', 'after'],
      ['/keys?workspaceId=ws%00', 'workspaceId'],
      ['/workspaces?after=%00', 'after'],
    ] as const) {
      const listed = await gw.admin<{ error: { code: string; param: string } }>('GET', path);
      expect([path, listed.status, listed.body.error.code, listed.body.error.param]).toEqual([path, 400, 'validation_error', param]);
    }
  });

  it('refuses a name holding half of a surrogate pair, which the store would keep as U+FFFD, with a 400 naming the field', async () => {
    for (const path of ['/keys', '/workspaces']) {
      const res = await gw.admin<{ error: { code: string; param: string } }>('POST', path, { name: 'a\ud800b' });
      expect([path, res.status, res.body.error.code, res.body.error.param]).toEqual([path, 400, 'validation_error', 'name']);
    }
    // A whole pair is a character like any other, and reads back as sent.
    const whole = await gw.admin<{ name: string }>('POST', '/workspaces', { name: 'a\ud83d\ude00b' });
    expect([whole.status, whole.body.name]).toEqual([201, 'a😀b']);
  });

  it('refuses a name of white space only, which lists would show as blank, with a 400 naming the field', async () => {
    const ws = await gw.admin<{ id: string }>('POST', '/workspaces', { name: 'kept' });
    const tries: [string, string, unknown][] = [
      ['POST', '/workspaces', { name: '   ' }],
      ['POST', '/keys', { name: '\t\n' }],
      ['PATCH', `/workspaces/${ws.body.id}`, { name: '\u00a0\u3000' }],
    ];
    for (const [method, path, body] of tries) {
      const res = await gw.admin<{ error: { code: string; param: string; message: string } }>(method, path, body);
      expect([path, res.status, res.body.error.code, res.body.error.param]).toEqual([path, 400, 'validation_error', 'name']);
      expect(res.body.error.message).toContain('must hold something other than white space');
    }
    const padded = await gw.admin<{ name: string }>('POST', '/keys', { name: ' ci runner ' });
    expect([padded.status, padded.body.name]).toEqual([201, ' ci runner ']);
    expect((await gw.admin<{ name: string }>('GET', `/workspaces/${ws.body.id}`)).body.name).toBe('kept');
  });

  it('routes without a body take an empty one labelled application/json; an all-optional body may be left out', async () => {
    const { id } = await gw.createKey();
    const send = (path: string) =>
      fetch(`${gw.url}/admin/v1${path}`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' } });
    const revoked = await send(`/keys/${id}/revoke`);
    expect(revoked.status).toBe(200);
    expect(((await revoked.json()) as { revoked: boolean }).revoked).toBe(true);
    // A body whose fields are all optional may be left out, labelled or not; a required field is then named.
    const empty = await send('/keys');
    expect(empty.status).toBe(201);
    expect(await empty.json()).toMatchObject({ rateLimitRpm: 60, budget: null, workspaceId: null });
    const bare = await fetch(`${gw.url}/admin/v1/keys`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    expect(bare.status).toBe(201);
    const nameless = await send('/workspaces');
    expect(nameless.status).toBe(400);
    expect(((await nameless.json()) as { error: { param: string } }).error.param).toBe('name');
  });

  it('refuses a body in another charset than UTF-8, as the public API does, rather than store its letters replaced', async () => {
    const latin1Cafe = Buffer.from('{"name":"Caf\xe9"}', 'latin1');
    const before = await gw.admin<{ data: { name: string }[] }>('GET', '/workspaces?limit=100');
    for (const [type, status, code] of [
      ['application/json; charset=iso-8859-1', 415, 'unsupported_media_type'],
      ['application/json', 400, 'validation_error'],
    ] as const) {
      const res = await fetch(`${gw.url}/admin/v1/workspaces`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': type },
        body: latin1Cafe,
      });
      const body = (await res.json()) as { error: { code: string } };
      expect([type, res.status, body.error.code]).toEqual([type, status, code]);
    }
    const after = await gw.admin<{ data: { name: string }[] }>('GET', '/workspaces?limit=100');
    expect(after.body.data.length).toBe(before.body.data.length);
    // UTF-8, said so, still passes.
    const utf8 = await fetch(`${gw.url}/admin/v1/workspaces`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json; charset=UTF-8' },
      body: JSON.stringify({ name: 'Café' }),
    });
    expect([utf8.status, ((await utf8.json()) as { name: string }).name]).toEqual([201, 'Café']);
  });

  it('lists keys and workspaces newest first, page by page, and reads a workspace', async () => {
    const ws = await gw.admin<{ id: string }>('POST', '/workspaces', { name: 'listed', budget: 7 });
    const made: string[] = [];
    for (let i = 0; i < 3; i++) made.push((await gw.createKey({ workspaceId: ws.body.id })).id);
    type Page = { data: { id: string; workspaceId: string | null }[]; hasMore: boolean };
    const first = await gw.admin<Page>('GET', `/keys?workspaceId=${ws.body.id}&limit=2`);
    expect([first.status, first.body.data.map((k) => k.id), first.body.hasMore]).toEqual([200, [made[2], made[1]], true]);
    const next = await gw.admin<Page>('GET', `/keys?workspaceId=${ws.body.id}&limit=2&after=${made[1]}`);
    expect([next.body.data.map((k) => k.id), next.body.hasMore]).toEqual([[made[0]], false]);
    // A listed key has what GET /keys/{id} shows, never the key itself.
    const one = await gw.admin<Record<string, unknown>>('GET', `/keys/${made[0]}`);
    expect(next.body.data[0]).toEqual(one.body);
    const all = await gw.admin<Page>('GET', '/keys?limit=100');
    expect(all.body.data.length).toBeGreaterThanOrEqual(3);
    expect(all.body.data.slice(0, 3).map((k) => k.id)).toEqual([...made].reverse());
    const got = await gw.admin<Record<string, unknown>>('GET', `/workspaces/${ws.body.id}`);
    expect(got.body).toEqual({ id: ws.body.id, name: 'listed', enabledModels: null, budget: 7, spent: 0 });
    const wss = await gw.admin<{ data: { id: string }[] }>('GET', '/workspaces?limit=1');
    expect(wss.body.data.map((w) => w.id)).toEqual([ws.body.id]);
    // Mistakes are named: a page size out of range, an unknown cursor or workspace, an unknown workspace id.
    for (const [path, status, param] of [
      ['/keys?limit=0', 400, 'limit'],
      ['/keys?limit=101', 400, 'limit'],
      ['/keys?after=key_nope', 400, 'after'],
      [`/keys?workspaceId=${ws.body.id}&after=${all.body.data.find((k) => k.workspaceId !== ws.body.id)?.id}`, 400, 'after'],
      ['/keys?workspaceId=ws_nope', 400, 'workspaceId'],
      ['/keys?colour=red', 400, 'colour'],
      ['/workspaces/ws_nope', 404, 'id'],
    ] as const) {
      const res = await gw.admin<{ error: { param: string | null } }>('GET', path);
      expect([path, res.status, res.body.error.param ?? null]).toEqual([path, status, param]);
    }
    // A page size out of range is told in words, not as the expression that checks it.
    const words = await gw.admin<{ error: { message: string } }>('GET', '/keys?limit=abc');
    expect(words.body.error.message).toBe("Invalid querystring: 'limit' must be a whole number from 1 to 100.");
    // A parameter named twice is told it takes one value, not that it is not a string.
    for (const [path, param, times] of [
      ['/keys?limit=1&limit=2', 'limit', 2],
      [`/keys?after=${made[1]}&after=${made[0]}`, 'after', 2],
      [`/keys?workspaceId=${ws.body.id}&workspaceId=${ws.body.id}&workspaceId=x`, 'workspaceId', 3],
      ['/workspaces?limit=1&limit=1', 'limit', 2],
      [`/workspaces?after=${ws.body.id}&after=${ws.body.id}`, 'after', 2],
    ] as const) {
      const res = await gw.admin<{ error: { message: string; code: string; param: string } }>('GET', path);
      expect([path, res.status, res.body.error]).toEqual([
        path,
        400,
        {
          type: 'validation_error',
          code: 'validation_error',
          param,
          message: `Invalid querystring: '${param}' is given ${times} times; a query parameter takes one value.`,
        },
      ]);
    }
  });

  it('PATCH /workspaces/{id} changes a workspace at once: a budget raised admits what it refused, models narrowed refuse', async () => {
    const ws = await gw.admin<{ id: string }>('POST', '/workspaces', { name: 'tight', budget: 0 });
    const { key } = await gw.createKey({ workspaceId: ws.body.id });
    const chat = () =>
      fetch(`${gw.baseA}/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'mistral/small', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }),
      });
    expect((await chat()).status).toBe(402);
    const raised = await gw.admin<Record<string, unknown>>('PATCH', `/workspaces/${ws.body.id}`, { budget: 5, name: 'roomy' });
    expect(raised.body).toEqual({ id: ws.body.id, name: 'roomy', enabledModels: null, budget: 5, spent: 0 });
    expect((await chat()).status).toBe(200);
    await gw.admin('PATCH', `/workspaces/${ws.body.id}`, { enabledModels: ['meta/llama-3.3-70b'] });
    const refused = await chat();
    expect([refused.status, ((await refused.json()) as { error: { code: string } }).error.code]).toEqual([404, 'model_not_found']);
    expect((await gw.admin<{ enabledModels: string[] }>('GET', `/workspaces/${ws.body.id}`)).body.enabledModels).toEqual(['meta/llama-3.3-70b']);
    for (const [path, body, status, param] of [
      [`/workspaces/${ws.body.id}`, {}, 400, null],
      [`/workspaces/${ws.body.id}`, { enabledModels: ['mistral/smal'] }, 400, 'enabledModels'],
      [`/workspaces/${ws.body.id}`, { budget: -1 }, 400, 'budget'],
      ['/workspaces/ws_nope', { budget: 1 }, 404, 'id'],
    ] as const) {
      const res = await gw.admin<{ error: { param: string | null } }>('PATCH', path, body);
      expect([path, res.status, res.body.error.param ?? null]).toEqual([path, status, param]);
    }
  });

  it('stores only a hash of the key', async () => {
    const { id, key } = await gw.createKey();
    const rec = await gw.gateway.services.store.keys.getById(id);
    expect(rec?.hash).toMatch(/^[0-9a-f]{64}$/);
    expect(JSON.stringify(rec)).not.toContain(key.slice(8));
  });

  it('enabledModels narrows what a workspace key may use and list (B)', async () => {
    const ws = await gw.admin<{ id: string }>('POST', '/workspaces', { name: 'narrow', enabledModels: ['mistral/small'] });
    const { key } = await gw.createKey({ workspaceId: ws.body.id });
    const list = await fetch(`${gw.baseB}/models`, { headers: { authorization: `Bearer ${key}` } });
    expect(((await list.json()) as { data: { id: string }[] }).data.map((m) => m.id)).toEqual(['mistral/small']);
    const res = await fetch(`${gw.baseA}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'x' }] }),
    });
    expect(res.status).toBe(404);
  });

  it('a model the workspace does not enable is model_not_found on every route, whatever its kind, retired or not', async () => {
    const ws = await gw.admin<{ id: string }>('POST', '/workspaces', { name: 'kinds', enabledModels: ['mistral/small'] });
    const { key } = await gw.createKey({ workspaceId: ws.body.id, rateLimitRpm: 1000 });
    const post = (base: string, path: string, body: unknown) =>
      fetch(`${base}${path}`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const cases: [string, Record<string, unknown>][] = [
      ['/chat/completions', { model: 'mistral/embed', messages: [{ role: 'user', content: 'x' }] }],
      ['/chat/completions', { model: 'cohere/rerank-v3.5:eu', messages: [{ role: 'user', content: 'x' }] }],
      ['/chat/completions', { model: 'mistral/nemo', messages: [{ role: 'user', content: 'x' }] }],
      ['/embeddings', { model: 'mistral/large', input: 'x' }],
      ['/embeddings', { model: 'mistral/nemo', input: 'x' }],
      ['/rerank', { model: 'mistral/embed', query: 'q', documents: ['a'] }],
    ];
    for (const [base, status] of [
      [gw.baseA, 404],
      [gw.baseB, 400],
    ] as const) {
      for (const [path, body] of cases) {
        const res = await post(base, path, body);
        const { error } = (await res.json()) as { error: { code: string; message: string } };
        // Neither its kind nor its retirement is told: the key's model list and GET /models/{id} do not show it either.
        expect([res.status, error.code, error.message], `${base}${path} ${body.model}`).toEqual([
          status,
          'model_not_found',
          `The model '${body.model}' is not enabled for this workspace.`,
        ]);
      }
    }
    // B's GET /models/{id} says the same of it as a request naming it: its list leaves it out, and why.
    for (const id of ['mistral/large', 'mistral/nemo']) {
      const res = await fetch(`${gw.baseB}/models/${encodeURIComponent(id)}`, { headers: { authorization: `Bearer ${key}` } });
      const { error } = (await res.json()) as { error: { code: string; message: string } };
      expect([res.status, error.code, error.message]).toEqual([400, 'model_not_found', `The model '${id}' is not enabled for this workspace.`]);
    }
  });

  it('enabledModels applies from the first request of a workspace key on, before and after the workspace is cached', async () => {
    const ws = await gw.admin<{ id: string }>('POST', '/workspaces', { name: 'first-request', enabledModels: ['mistral/small'] });
    const { key } = await gw.createKey({ workspaceId: ws.body.id });
    const chat = (model: string) =>
      fetch(`${gw.baseA}/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model, messages: [{ role: 'user', content: 'x' }] }),
      });
    // The first request reads the workspace from the store; the next ones are answered from the cache.
    const refused = await chat('meta/llama-3.3-70b');
    expect(refused.status).toBe(404);
    expect(((await refused.json()) as { error: { message: string } }).error.message).toContain('not enabled for this workspace');
    expect((await chat('mistral/small')).status).toBe(200);
    expect((await chat('meta/llama-3.3-70b')).status).toBe(404);
  });

  it('answers clear 400s for bad bodies', async () => {
    const cases: [string, string, unknown, string][] = [
      ['POST', '/workspaces', {}, "'name' is required"],
      ['POST', '/workspaces', { name: 'x', budget: -1 }, "'budget'"],
      ['POST', '/keys', { rateLimitRpm: 0 }, "'rateLimitRpm'"],
      ['POST', '/keys', { rateLimitRpm: 'fast' }, "'rateLimitRpm'"],
      ['POST', '/keys', { color: 'red' }, "'color' is not a known field"],
      ['POST', '/keys', { workspaceId: 'ws_nope' }, "Unknown workspaceId 'ws_nope'"],
      ['PATCH', '/keys/any', {}, 'Invalid body: the body must have at least one field.'],
      ['PATCH', '/workspaces/any', {}, 'Invalid body: the body must have at least one field.'],
    ];
    for (const [method, path, body, message] of cases) {
      const res = await gw.admin<{ error: { code: string; message: string } }>(method, path, body);
      expect(res.status, `${method} ${path} ${JSON.stringify(body)}`).toBe(400);
      expect(res.body.error.code).toBe('validation_error');
      expect(res.body.error.message).toContain(message);
    }
    expect((await gw.admin('GET', '/keys/key_missing')).status).toBe(404);
  });

  it('refuses a wrong admin token and hides the API without GW_ADMIN_TOKEN', async () => {
    const wrong = await fetch(`${gw.url}/admin/v1/keys`, {
      method: 'POST',
      headers: { authorization: 'Bearer nope', 'content-type': 'application/json' },
      body: '{}',
    });
    expect(wrong.status).toBe(401);
    const other = await startGateway({ env: { GW_ADMIN_TOKEN: undefined }, sim: gw.sim });
    try {
      const res = await fetch(`${other.url}/admin/v1/keys`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
        body: '{}',
      });
      expect(res.status).toBe(404);
    } finally {
      await other.close();
    }
  });

  it('rebuilds the registry on demand and reports each provider', async () => {
    const res = await gw.admin<{ models: number; providers: Record<string, string> }>('POST', '/registry/rebuild');
    expect(res.status).toBe(200);
    expect(res.body.models).toBeGreaterThan(5);
    expect(res.body.providers.scaleway).toBe('ok');
    expect(Object.keys(res.body.providers).sort()).toEqual(Object.keys(gw.sim.providers).sort());
  });

  it('a PATCH of a revoked key answers 409 key_revoked, changes nothing, and the key stays refused', async () => {
    const { id, key } = await gw.createKey({ rateLimitRpm: 60, budget: 1 });
    await gw.admin('POST', `/keys/${id}/revoke`);
    const patched = await gw.admin<{ error: { code: string; type: string; message: string; param: string } }>('PATCH', `/keys/${id}`, {
      rateLimitRpm: 600,
      budget: 50,
    });
    expect(patched.status).toBe(409);
    expect(patched.body.error).toMatchObject({ code: 'key_revoked', type: 'key_revoked', param: 'id' });
    expect(patched.body.error.message).toContain('is revoked');
    const got = await gw.admin<Record<string, unknown>>('GET', `/keys/${id}`);
    expect(got.body).toMatchObject({ id, rateLimitRpm: 60, budget: 1, revoked: true });
    expect((await fetch(`${gw.baseA}/models`, { headers: { authorization: `Bearer ${key}` } })).status).toBe(401);
    // Not a 404: the key exists, as GET shows; an unknown id still is one.
    expect((await gw.admin('PATCH', '/keys/key_unknown', { budget: 2 })).status).toBe(404);
  });

  it('revocation takes effect at once on this instance', async () => {
    const { id, key } = await gw.createKey();
    const ok = await fetch(`${gw.baseA}/models`, { headers: { authorization: `Bearer ${key}` } });
    expect(ok.status).toBe(200);
    await gw.admin('POST', `/keys/${id}/revoke`);
    const after = await fetch(`${gw.baseA}/models`, { headers: { authorization: `Bearer ${key}` } });
    expect(after.status).toBe(401);
  });
});
