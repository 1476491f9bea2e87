import {
  CreatedKey,
  CreateKeyBody,
  CreateWorkspaceBody,
  errorEnvelopeSchema,
  KeyList,
  KeyListQuery,
  KeyParams,
  KeyView,
  PatchKeyBody,
  PatchWorkspaceBody,
  RebuildResult,
  Workspace,
  WorkspaceList,
  WorkspaceListQuery,
  WorkspaceParams,
} from '@gw/schema';
import type { FastifyBaseLogger, FastifyInstance, FastifyReply } from 'fastify';
import { checkAdminToken, refuseDoubleAuthorization } from '../../auth/admin-token.js';
import { CONFIRM_TIMEOUT_MS, DEAF_TRUST_MS, generateApiKey, PUBLISH_WAIT_MS } from '../../auth/api-keys.js';
import { GatewayError, isGatewayError } from '../../errors/gateway-error.js';
import { errorSummary, warnOnFailure } from '../../lib/error-summary.js';
import { newId } from '../../lib/ids.js';
import { databaseRefusing } from '../../store/refusing.js';
import type { ApiKeyRecord, KeyRepo, Workspace as WorkspaceRecord } from '../../store/types.js';
import { budgetSet } from '../budget.js';
import { sendError } from '../errors.js';
import { emptyParamError, noRouteError } from '../no-route.js';
import { refuseNonUtf8Json } from '../plugins/json-charset.js';
import { repeatedQueryParam } from '../query-values.js';
import type { Services } from '../services.js';

export const DEFAULT_RPM = 60;

/** On an admin change's answer: `unconfirmed` when some instance was not seen to apply it before the answer. */
export const PROPAGATION_HEADER = 'X-Gateway-Propagation';

/**
 * Tells every instance of a change and waits until each has applied it. An instance that did not confirm in time
 * (stalled, far from Redis, or a subscriber that is no gateway) applies it when the message reaches it: said here,
 * and on the answer when there is one ({@link PROPAGATION_HEADER}).
 */
async function announce(services: Services, log: FastifyBaseLogger, op: 'revoke' | 'changed' | 'workspace', id: string, reply?: FastifyReply): Promise<void> {
  const { receivers, unconfirmed, publish } = await services.auth.announce(op, id);
  if (unconfirmed === 0 && publish === 'answered') {
    reply?.header(PROPAGATION_HEADER, 'confirmed');
    return;
  }
  reply?.header(PROPAGATION_HEADER, 'unconfirmed');
  const what = op === 'workspace' ? 'workspace' : 'key';
  const named = { [op === 'workspace' ? 'workspaceId' : 'keyId']: id };
  if (publish === 'answered') {
    log.warn(
      { ...named, receivers, unconfirmed },
      `${unconfirmed} of ${receivers} subscribers of gw:keys did not confirm the ${what} change within ${CONFIRM_TIMEOUT_MS} ms; answered anyway, they apply it as the message reaches them`,
    );
  } else {
    // Nobody could confirm: other instances apply it as the message reaches them, or from the store (docs/decisions.md).
    const why =
      publish === 'late'
        ? `Redis did not answer its publish on gw:keys within ${PUBLISH_WAIT_MS} ms (the publish goes on)`
        : 'its publish on gw:keys failed (Redis unreachable; it is sent again once Redis is back)';
    log.warn(
      named,
      `the ${what} change is made but no other instance confirmed it: ${why}; answered anyway, each applies it as the message reaches it, or reads it from the store: within ${DEAF_TRUST_MS} ms of a use once it hears nothing from Redis, at its key cache TTL at the latest`,
    );
  }
}

/**
 * An error no route expected, while the store does not answer or refuses work for now (read-only, full): the store's
 * outage (503, retry), not a fault of the gateway's (500).
 */
async function unlessStoreDown(err: unknown, services: Services): Promise<unknown> {
  const known = isGatewayError(err) || (typeof (err as { statusCode?: unknown }).statusCode === 'number' && (err as { statusCode: number }).statusCode < 500);
  if (known) return err;
  if (databaseRefusing(err)) return storeUnavailable(err);
  try {
    await services.store.ping();
    return err;
  } catch {
    return storeUnavailable(err);
  }
}

/** How long an admin request waits on the store before asking whether the database answers at all. */
export const STORE_STALL_MS = 1_000;

/**
 * A store call that has not answered after {@link STORE_STALL_MS} while the database does not answer a ping
 * (frozen, a network black hole) fails at once as the store's outage (503), within a few seconds, rather than
 * after the client-side query timeout. A database that answers the ping is only slow: the call is awaited.
 */
function boundedByStore<T>(work: Promise<T>, services: Services, landedLate?: (value: T) => void): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const stalled = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      services.store.ping().then(
        () => {},
        (err: unknown) => {
          reject(storeUnavailable(err));
          // Answered 503, but the database may still do the work once it is back: `landedLate` is told if it does.
          if (landedLate) work.then(landedLate, () => {});
        },
      );
    }, STORE_STALL_MS);
  });
  // The abandoned call's own failure, later, is no one's to handle.
  work.catch(() => {});
  return Promise.race([work, stalled]).finally(() => clearTimeout(timer));
}

/**
 * A change of a key or workspace, {@link boundedByStore}. When the call has answered 503 on a stalled database, the
 * write may still land once the database is back: every instance is then told, as the call would have told them, so
 * that a key the store shows revoked (or a lowered budget) does not go on being served from caches until they lapse.
 */
function changeThenAnnounce<T>(
  work: Promise<T | null>,
  services: Services,
  log: FastifyBaseLogger,
  op: 'revoke' | 'changed' | 'workspace',
  id: string,
): Promise<T | null> {
  return boundedByStore(work, services, (rec) => {
    if (rec !== null) announce(services, log, op, id).catch(warnOnFailure(log, 'could not tell the other instances of a change the store made late'));
  });
}

/**
 * A create, {@link boundedByStore}. When the call has answered 503 on a stalled database, the insert may still land once
 * the database is back: the row is then deleted, so that the 503 means that nothing was made, and the retry it asks for
 * makes no second workspace, nor a key whose secret nobody saw (it was only in the answer that was never sent).
 */
function createOrUndo<T extends { id: string }>(
  work: Promise<T>,
  services: Services,
  log: FastifyBaseLogger,
  what: 'key' | 'workspace',
  undo: (id: string) => Promise<boolean>,
): Promise<T> {
  return boundedByStore(work, services, async ({ id }) => {
    const named = { [what === 'key' ? 'keyId' : 'workspaceId']: id };
    const late = `the ${what} ${id} the store created after its create had answered 503`;
    try {
      if (await undo(id)) log.warn(named, `deleted ${late}: the retry the answer asked for makes the only one`);
      else log.warn(named, `kept ${late}: a key refers to it`);
    } catch (undoErr) {
      log.warn({ ...named, err: errorSummary(undoErr) }, `could not delete ${late}; delete or revoke it`);
    }
  });
}

/** The repository with each of its calls {@link boundedByStore}. */
function bounded<R extends object>(repo: R, services: Services): R {
  return new Proxy(repo, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target) as unknown;
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => boundedByStore(Promise.resolve(value.apply(target, args)), services);
    },
  });
}

function storeUnavailable(cause: unknown): GatewayError {
  return new GatewayError('store_unavailable', 'The store is unreachable; please retry shortly.', { retryAfterS: 1, cause });
}

function keyView(k: ApiKeyRecord) {
  return { id: k.id, name: k.name, workspaceId: k.workspaceId, rateLimitRpm: k.rateLimitRpm, budget: k.budget, spent: k.spent, revoked: k.revoked };
}

function workspaceView(ws: WorkspaceRecord) {
  return { id: ws.id, name: ws.name, enabledModels: ws.enabledModels, budget: ws.budget, spent: ws.spent };
}

const DEFAULT_PAGE = 20;

/**
 * A page of `list` as the admin lists answer it: one row more is read to tell whether another page follows.
 * An `after` naming no row of that list is refused, where it would otherwise read as the list's end.
 */
async function page<T, R>(
  query: { limit?: string; after?: string },
  exists: (id: string) => Promise<unknown>,
  list: (page: { limit: number; after?: string }) => Promise<T[]>,
  view: (row: T) => R,
): Promise<{ data: R[]; hasMore: boolean }> {
  const limit = query.limit === undefined ? DEFAULT_PAGE : Number(query.limit);
  if (query.after !== undefined && !(await exists(query.after))) {
    throw new GatewayError('validation', `'after' is '${query.after}', which names nothing in this list: give the id of the last row of the page before.`, {
      param: 'after',
    });
  }
  const rows = await list({ limit: limit + 1, ...(query.after === undefined ? {} : { after: query.after }) });
  return { data: rows.slice(0, limit).map(view), hasMore: rows.length > limit };
}

/**
 * A workspace's allow-list as the configuration names its models: an id
 * it does not know (a typo) is refused rather than kept as a silent no-op,
 * whether or not a provider lists the model right now, and an alias such
 * as `family/model:eu` is stored as the model's id.
 */
function knownModels(services: Services, ids: readonly string[] | null): string[] | null {
  if (ids === null) return null;
  const idOf = (id: string) => services.registry.get(id)?.id ?? services.registry.configuredId(id);
  const unknown = ids.filter((id) => idOf(id) === undefined);
  if (unknown.length > 0) {
    const names = unknown.map((id) => `'${id}'`).join(', ');
    throw new GatewayError('validation', `Unknown model${unknown.length > 1 ? 's' : ''} in enabledModels: ${names} (GET /v1/models lists them).`, {
      param: 'enabledModels',
    });
  }
  return [...new Set(ids.map((id) => idOf(id) as string))];
}

/** The path of the first string (or key) in `value` that `holds` is true of, '' for `value` itself; null if none. */
function foundAt(value: unknown, path: string, holds: (text: string) => boolean): string | null {
  if (typeof value === 'string') return holds(value) ? path : null;
  if (typeof value !== 'object' || value === null) return null;
  for (const [k, v] of Object.entries(value)) {
    const at = path ? `${path}.${k}` : k;
    if (holds(k)) return path || 'body';
    const found = foundAt(v, at, holds);
    if (found !== null) return found;
  }
  return null;
}

const hasNul = (text: string) => text.includes('\u0000');
const nulAt = (value: unknown, path: string) => foundAt(value, path, hasNul);
/** Half of a surrogate pair (JSON's `\ud800` alone): no character; the store would keep U+FFFD in its place. */
const LONE_SURROGATE = /\p{Cs}/u;
const hasLoneSurrogate = (text: string) => LONE_SURROGATE.test(text);

/** Admin errors are in variant A's envelope (the admin API is not under /alt): documented as the public routes' are. */
const ADMIN_ERROR = errorEnvelopeSchema('a');

function op(id: string, summary: string, schema: { response?: Record<string, unknown> } & Record<string, unknown>) {
  const response = { ...(schema.response ?? {}), '4XX': ADMIN_ERROR, '5XX': ADMIN_ERROR };
  return { ...schema, response, operationId: `admin_${id}`, summary, tags: ['Admin'], security: [{ adminToken: [] }] };
}

/** The operator API of INTERFACES.md, under /admin/v1, behind GW_ADMIN_TOKEN. */
export async function adminRoutes(app: FastifyInstance, services: Services & { adminToken: string }): Promise<void> {
  app.setErrorHandler(async (err, request, reply) => sendError(await unlessStoreDown(err, services), request, reply, 'a'));
  const store = { workspaces: bounded(services.store.workspaces, services), keys: bounded(services.store.keys, services) };
  // Routes without a body (revoke, rebuild) are often called with `Content-Type: application/json` and nothing after it.
  // A body in another charset than UTF-8 is refused as on the public API, rather than stored with its letters replaced.
  refuseNonUtf8Json(app, services.bodyMemory, { emptyIsNoBody: true });
  // A route whose body fields are all optional (POST /keys) takes none at all, labelled or not, as `{}`; one with required fields then names them.
  app.addHook('preValidation', (request, _reply, done) => {
    if (request.body === undefined && request.routeOptions.schema?.body !== undefined) request.body = {};
    const queryFields = (request.routeOptions.schema?.querystring as { properties?: Record<string, unknown> } | undefined)?.properties;
    const repeated = queryFields ? repeatedQueryParam(request.query, Object.keys(queryFields)) : null;
    if (repeated) return done(repeated);
    // PostgreSQL's text cannot hold NUL: refused here, rather than a 500 from the store. No id has one: a 404.
    // `/keys/` reaches `/keys/:id` with an empty id: the route meant (GET /keys), not a 400 about the id.
    const empty = emptyParamError(app, request, 'admin route');
    if (empty) return done(empty);
    // A path no route takes (its `*` holds the NUL) is the 404 handler's, which names the path.
    if (request.routeOptions.url !== undefined && nulAt(request.params, '') !== null)
      return done(new GatewayError('not_found', `No admin resource at ${request.method} ${request.routeOptions.url}: the id holds a NUL character.`));
    const field = nulAt(request.body, '');
    if (field !== null)
      return done(new GatewayError('validation', `Invalid body: '${field || 'body'}' holds a NUL character (\\u0000).`, { param: field || null }));
    // Stored, a name sent with half a surrogate pair would read back otherwise than sent.
    const half = foundAt(request.body, '', hasLoneSurrogate);
    if (half !== null)
      return done(
        new GatewayError('validation', `Invalid body: '${half || 'body'}' holds half of a surrogate pair (a \\ud800-\\udfff escape without its other half).`, {
          param: half || null,
        }),
      );
    // A list's `after` or `workspaceId` reaches the store as its body's fields do.
    const queryField = nulAt(request.query, '');
    if (queryField !== null)
      return done(new GatewayError('validation', `Invalid querystring: '${queryField}' holds a NUL character (\\u0000).`, { param: queryField }));
    done();
  });
  // A path with routes for other methods only (GET /workspaces) is a 405 with Allow, as on the public API (docs/errors.md).
  // A path off by a slash or its letter case names the route meant, as on the public API.
  app.setNotFoundHandler((request, reply) => sendError(noRouteError(app, request, reply, 'admin route'), request, reply, 'a'));
  app.addHook('onRequest', async (request) => {
    refuseDoubleAuthorization(request.raw.rawHeaders);
    checkAdminToken(request.headers.authorization, services.adminToken);
  });

  app.post(
    '/workspaces',
    { schema: op('createWorkspace', 'Create a workspace', { body: CreateWorkspaceBody, response: { 201: Workspace } }) },
    async (request, reply) => {
      const body = request.body as CreateWorkspaceBody;
      checkBudget(body.budget);
      const ws = await createOrUndo(
        services.store.workspaces.create({
          id: newId('ws'),
          name: body.name,
          enabledModels: knownModels(services, body.enabledModels ?? null),
          budget: body.budget ?? null,
        }),
        services,
        request.log,
        'workspace',
        (id) => services.store.workspaces.deleteUnused(id),
      );
      return reply.code(201).send(workspaceView(ws));
    },
  );

  app.get(
    '/workspaces',
    { schema: op('listWorkspaces', 'List workspaces, newest first', { querystring: WorkspaceListQuery, response: { 200: WorkspaceList } }) },
    async (request) => {
      const query = request.query as { limit?: string; after?: string };
      return page(
        query,
        (id) => store.workspaces.get(id),
        (p) => store.workspaces.list(p),
        workspaceView,
      );
    },
  );

  app.get('/workspaces/:id', { schema: op('getWorkspace', 'Get a workspace', { params: WorkspaceParams, response: { 200: Workspace } }) }, async (request) => {
    const { id } = request.params as { id: string };
    const ws = await store.workspaces.get(id);
    if (!ws) throw new GatewayError('not_found', `No workspace '${id}'.`, { param: 'id' });
    return workspaceView(ws);
  });

  app.post(
    '/keys',
    { schema: op('createKey', 'Create an API key (the key is shown only here)', { body: CreateKeyBody, response: { 201: CreatedKey } }) },
    async (request, reply) => {
      const body = request.body as CreateKeyBody;
      checkBudget(body.budget);
      if (typeof body.workspaceId === 'string' && !(await store.workspaces.get(body.workspaceId))) {
        throw new GatewayError('validation', `Unknown workspaceId '${body.workspaceId}'.`, { param: 'workspaceId' });
      }
      const { key, hash } = generateApiKey();
      const rec = await createOrUndo(
        services.store.keys.create({
          id: newId('key'),
          name: body.name ?? null,
          workspaceId: body.workspaceId ?? null,
          hash,
          rateLimitRpm: body.rateLimitRpm ?? DEFAULT_RPM,
          budget: body.budget ?? null,
        }),
        services,
        request.log,
        'key',
        // A key already gone is as good as deleted.
        (id) => services.store.keys.delete(id).then(() => true),
      );
      return reply.code(201).send({ id: rec.id, key, name: rec.name, workspaceId: rec.workspaceId, rateLimitRpm: rec.rateLimitRpm, budget: rec.budget });
    },
  );

  app.patch(
    '/workspaces/:id',
    {
      schema: op('updateWorkspace', 'Change a workspace’s name, models or budget, at once on every instance', {
        params: WorkspaceParams,
        body: PatchWorkspaceBody,
        response: { 200: Workspace },
      }),
    },
    async (request, reply) => {
      const { id } = request.params as { id: string };
      const body = request.body as PatchWorkspaceBody;
      checkBudget(body.budget);
      const ws = await changeThenAnnounce(
        services.store.workspaces.update(id, {
          ...(body.name === undefined ? {} : { name: body.name }),
          ...(body.enabledModels === undefined ? {} : { enabledModels: knownModels(services, body.enabledModels) }),
          ...(body.budget === undefined ? {} : { budget: body.budget }),
        }),
        services,
        request.log,
        'workspace',
        id,
      );
      if (!ws) throw new GatewayError('not_found', `No workspace '${id}'.`, { param: 'id' });
      if (body.budget !== undefined) await budgetSet(services, { workspace: ws });
      await announce(services, request.log, 'workspace', id, reply);
      return workspaceView(ws);
    },
  );

  app.get(
    '/keys',
    { schema: op('listKeys', 'List API keys, newest first (never the keys themselves)', { querystring: KeyListQuery, response: { 200: KeyList } }) },
    async (request) => {
      const { workspaceId, ...query } = request.query as { limit?: string; after?: string; workspaceId?: string };
      if (workspaceId !== undefined && !(await store.workspaces.get(workspaceId))) {
        throw new GatewayError('validation', `Unknown workspaceId '${workspaceId}'.`, { param: 'workspaceId' });
      }
      const inWorkspace = workspaceId === undefined ? {} : { workspaceId };
      return page(
        query,
        async (id) => {
          const key = await store.keys.getById(id);
          return key !== null && (workspaceId === undefined || key.workspaceId === workspaceId);
        },
        (p) => store.keys.list({ ...p, ...inWorkspace }),
        keyView,
      );
    },
  );

  app.get('/keys/:id', { schema: op('getKey', 'Get an API key', { params: KeyParams, response: { 200: KeyView } }) }, async (request) => {
    const { id } = request.params as { id: string };
    const rec = await store.keys.getById(id);
    if (!rec) throw new GatewayError('not_found', `No API key '${id}'.`, { param: 'id' });
    return keyView(rec);
  });

  app.patch(
    '/keys/:id',
    { schema: op('updateKey', 'Change a key’s rate limit or budget', { params: KeyParams, body: PatchKeyBody, response: { 200: KeyView } }) },
    async (request, reply) => {
      const { id } = request.params as { id: string };
      const body = request.body as PatchKeyBody;
      checkBudget(body.budget);
      const rec = await changeThenAnnounce(
        services.store.keys.update(id, {
          ...(body.rateLimitRpm === undefined ? {} : { rateLimitRpm: body.rateLimitRpm }),
          ...(body.budget === undefined ? {} : { budget: body.budget }),
        }),
        services,
        request.log,
        'changed',
        id,
      );
      if (!rec) throw await unchangedKeyError(store.keys, id);
      if (body.budget !== undefined) await budgetSet(services, { key: rec });
      await announce(services, request.log, 'changed', id, reply);
      return keyView(rec);
    },
  );

  app.post(
    '/keys/:id/revoke',
    { schema: op('revokeKey', 'Revoke an API key, at once on every instance', { params: KeyParams, response: { 200: KeyView } }) },
    async (request, reply) => {
      const { id } = request.params as { id: string };
      const rec = await changeThenAnnounce(services.store.keys.revoke(id), services, request.log, 'revoke', id);
      if (!rec) throw new GatewayError('not_found', `No API key '${id}'.`, { param: 'id' });
      await announce(services, request.log, 'revoke', id, reply);
      return keyView(rec);
    },
  );

  app.post(
    '/registry/rebuild',
    { schema: op('rebuildRegistry', 'Rebuild the model registry from every provider now', { response: { 200: RebuildResult } }) },
    async () => {
      return services.rebuildRegistry();
    },
  );
}

/**
 * Why a key's PATCH changed nothing: no key has the id (404), or the key is revoked (409). A revoked key is still
 * shown by GET and revoked again without error, so it is no 404; a change of its limits would read as if it worked.
 */
async function unchangedKeyError(keys: KeyRepo, id: string): Promise<GatewayError> {
  if (!(await keys.getById(id))) return new GatewayError('not_found', `No API key '${id}'.`, { param: 'id' });
  return new GatewayError(
    'key_revoked',
    `API key '${id}' is revoked: its rate limit and budget cannot be changed, and it cannot be brought back. Create a new key instead.`,
    {
      param: 'id',
    },
  );
}

/** The smallest positive amount the money columns hold, `numeric(24, 12)`. */
const SMALLEST_AMOUNT = 1e-12;

/** A positive budget the store would round to 0 (a key that can spend nothing, without saying so) is refused instead. */
function checkBudget(budget: number | null | undefined): void {
  if (budget === undefined || budget === null || budget === 0 || budget >= SMALLEST_AMOUNT) return;
  throw new GatewayError(
    'validation',
    `'budget' is ${budget} EUR, below the smallest amount stored (1e-12 EUR): give at least that, 0 to allow no spending, or null for no budget.`,
    { param: 'budget' },
  );
}
