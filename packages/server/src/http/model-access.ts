import { type ModelKind, STRATEGIES, type Strategy, type Variant } from '@gw/schema';
import type { FastifyRequest } from 'fastify';
import { GatewayError } from '../errors/gateway-error.js';
import type { RouteOptions } from '../routing/plan.js';
import { LIST_RETRY_FIRST_S, type RegistryModel } from '../routing/registry.js';
import type { Services } from './services.js';

/**
 * Finds a model the caller may use for this kind of request, or throws the right error.
 * At once (no promise) when the caller's workspace, if any, is cached: the usual case.
 */
export function resolveModel(services: Services, request: FastifyRequest, id: string, kind: ModelKind): RegistryModel | Promise<RegistryModel> {
  const model = services.registry.get(id);
  if (!model) return refuseUnknown(services, request, id, kind);
  const enabled = enabledModels(services, request);
  const variant = request.gw.variant;
  return enabled instanceof Promise ? enabled.then((list) => checkModel(model, id, kind, list, variant)) : checkModel(model, id, kind, enabled, variant);
}

/**
 * The workspace's allow-list is checked first: a model the key may not use is model_not_found on every route,
 * as variant B's model list and GET /models/{id} hide it (A's list the whole registry: docs/decisions.md), never a
 * 410 or a 400 telling what kind of model it is.
 */
function checkModel(model: RegistryModel, id: string, kind: ModelKind, enabled: EnabledModels, variant: Variant): RegistryModel {
  if (enabled !== null && !enabled.has(model.id)) {
    throw new GatewayError('model_not_found', `The model '${id}' is not enabled for this workspace.`, { param: 'model' });
  }
  // Variant B's embeddings are a private beta: to a B client the other embedding models do not exist (its list and
  // GET /models/{id} hide them), on any route; the embeddings route says so in its own words.
  if (variant === 'b' && model.kind === 'embedding' && !model.beta && kind !== 'embedding') {
    throw new GatewayError('model_not_found', `The model '${id}' does not exist. Model ids are '<family>/<model>', as GET /alt/v1/models lists them.`, {
      param: 'model',
    });
  }
  if (model.deprecated) throw new GatewayError('model_deprecated', `The model '${id}' has been retired upstream.`, { param: 'model' });
  if (model.kind !== kind)
    throw new GatewayError('validation', `The model '${id}' is ${kindPhrase(model.kind)} model, not ${kindPhrase(kind)} model.`, { param: 'model' });
  return model;
}

/** The model_not_found of an id the registry lacks, with a hint among the models this caller may use (its workspace read first if need be). */
function refuseUnknown(services: Services, request: FastifyRequest, id: string, kind: ModelKind): never | Promise<never> {
  const refuse = (enabled: EnabledModels): never => {
    const usable = (m: RegistryModel) =>
      !m.deprecated &&
      m.kind === kind &&
      (enabled === null || enabled.has(m.id)) &&
      // Variant B's embeddings are a beta of some models: it refuses the others (routes/embeddings.ts).
      (request.gw.variant !== 'b' || kind !== 'embedding' || m.beta);
    const unread = services.registry.unreadable(id);
    if (unread && usable(unread.model)) {
      // Its provider was unreachable when the gateway started: an outage (retried as one), not a model that does not exist.
      const named = unread.providers.join(', ');
      throw new GatewayError(
        'no_healthy_provider',
        `No provider of '${unread.model.id}' can be reached right now: the model list of ${named} could not be read since the gateway started.`,
        { retryAfterS: LIST_RETRY_FIRST_S },
      );
    }
    const unlisted = services.registry.unlistedModel(id);
    // By its configured id: the workspace's list names `family/model`, the request may add `:eu`.
    const unlistedBy = unlisted?.kind === kind && (enabled === null || enabled.has(unlisted.id)) ? unlisted.providers : undefined;
    if (unlistedBy) {
      // Configured, but dropped from every provider's model list (retired or renamed there): not served now, which
      // a client (and the operator reading its report) is told, rather than that the id is wrong.
      throw notServedNow(id, unlistedBy, request.gw.variant, 'model');
    }
    throw new GatewayError('model_not_found', `The model '${id}' does not exist.${modelHint(services, id, request.gw.variant, usable)}`, { param: 'model' });
  };
  const enabled = enabledModels(services, request);
  return enabled instanceof Promise ? enabled.then(refuse) : refuse(enabled);
}

/** The model_not_found of a configured model that no provider (these) lists right now. */
export function notServedNow(id: string, providers: string[], variant: Variant, param: string): GatewayError {
  return new GatewayError(
    'model_not_found',
    `The model '${id}' is not served right now: no provider of it (${providers.join(', ')}) lists it in its models. GET ${variant === 'a' ? '/v1' : '/alt/v1'}/models lists the models served.`,
    { param },
  );
}

/**
 * GET /models/{id} of a configured model left out only because a provider that may serve it has had no readable list
 * since start: not known not to be served (a request for it is the outage's 503/502), so never said to be unlisted.
 */
export function notReadYet(id: string, providers: string[], variant: Variant): GatewayError {
  return new GatewayError(
    'model_not_found',
    `The model '${id}' is not served right now: the model list of ${providers.join(', ')} could not be read since the gateway started. GET ${variant === 'a' ? '/v1' : '/alt/v1'}/models lists the models served.`,
    { param: 'id' },
  );
}

/** 'a chat', 'an embedding', 'a rerank', 'an audio'. */
function kindPhrase(kind: ModelKind): string {
  return `${/^[aeiou]/.test(kind) ? 'an' : 'a'} ${kind}`;
}

/** The caller's workspace allow-list (null: every model); at once when the workspace is cached. */
export function enabledModels(services: Services, request: FastifyRequest): EnabledModels | Promise<EnabledModels> {
  const workspaceId = request.gw.key?.workspaceId;
  if (!workspaceId) return null;
  const ws = services.workspaces.get(workspaceId);
  return ws instanceof Promise ? ws.then((w) => w?.enabled ?? null) : (ws?.enabled ?? null);
}

/** A workspace's allow-list as a set (a list of 1,000 ids is checked per model listed and per request); null: every model. */
export type EnabledModels = ReadonlySet<string> | null;

/** A header's value; null only when it is absent: one sent empty is a value, refused as any other that is not valid. */
function header(request: FastifyRequest, name: string): string | null {
  const v = request.headers[name];
  const s = Array.isArray(v) ? v[0] : v;
  return s === undefined ? null : s.trim();
}

/** The most of a header's value an error message repeats: enough to recognise it, not a header's 8 KB sent back. */
const ECHO_MAX_CHARS = 64;

/**
 * A header's value as an error message repeats it: at most {@link ECHO_MAX_CHARS} characters, its bytes read as
 * UTF-8 (Node gives header values a character per byte, so 'scalewäy' would come back as 'scalewÃ¤y').
 */
function echo(raw: string): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: any character past ASCII means the bytes need decoding
  const value = /[^\x00-\x7f]/.test(raw) ? Buffer.from(raw, 'latin1').toString('utf8') : raw;
  return value.length > ECHO_MAX_CHARS ? `${value.slice(0, ECHO_MAX_CHARS)}…` : value;
}

/** A provider named in a header that the configuration lacks (the ids are listed only when a request names one). */
function unknownProvider(services: Services, id: string | null): boolean {
  return id !== null && !services.registry.providerIds().includes(id);
}

/** Reads the routing headers, refusing values outside their documented range. */
export function routeOptions(services: Services, request: FastifyRequest): RouteOptions {
  const strategy = header(request, 'x-gateway-strategy') ?? 'default';
  if (!(STRATEGIES as readonly string[]).includes(strategy)) {
    throw new GatewayError('validation', `Invalid X-Gateway-Strategy '${echo(strategy)}': expected one of ${STRATEGIES.join(', ')}.`, {
      param: 'X-Gateway-Strategy',
    });
  }
  const hopsRaw = header(request, 'x-gateway-max-hops') ?? '2';
  if (!/^[0-5]$/.test(hopsRaw)) {
    throw new GatewayError('validation', `Invalid X-Gateway-Max-Hops '${echo(hopsRaw)}': expected an integer from 0 to 5.`, { param: 'X-Gateway-Max-Hops' });
  }
  const pin = header(request, 'x-gateway-provider');
  if (unknownProvider(services, pin)) {
    const code = request.gw.variant === 'b' ? 'provider_unsupported' : 'validation';
    const known = services.registry.providerIds().join(', ');
    throw new GatewayError(code, `Unknown provider '${echo(pin ?? '')}' in X-Gateway-Provider: expected one of ${known}.`, { param: 'X-Gateway-Provider' });
  }
  const prefer = header(request, 'x-gateway-provider-prefer');
  if (unknownProvider(services, prefer)) {
    const known = services.registry.providerIds().join(', ');
    throw new GatewayError('validation', `Unknown provider '${echo(prefer ?? '')}' in X-Gateway-Provider-Prefer: expected one of ${known}.`, {
      param: 'X-Gateway-Provider-Prefer',
    });
  }
  const body = request.body as { stream?: unknown } | null | undefined;
  const stream = typeof body === 'object' && body !== null && body.stream === true;
  return { strategy: strategy as Strategy, pin, prefer, maxHops: Number(hopsRaw), stats: services.offerStats, stream };
}

/**
 * What a client that named no model of ours most likely meant: the gateway's id of a model it named by its own
 * name (`small`) or by a provider's (`mistral-small-latest`), among the models `usable` by this request only (never
 * one the caller would then be refused: retired, of another kind, not enabled for its workspace), else where the ids are listed: the client's own
 * variant's list, since the other variant's answers in another envelope. On the error path only.
 */
export function modelHint(services: Services, id: string, variant: Variant, usable: (m: RegistryModel) => boolean): string {
  // Ids are matched exactly; the hint forgives what a client's typing or templating adds: case, outer spaces, ':EU',
  // and a slash encoded once too often (`meta%252Fllama` in a path reaches here as `meta%2Fllama`).
  const lower = id.trim().toLowerCase().replace(/:eu$/, '').replaceAll('%2f', '/');
  const meant = services.registry
    .list()
    .filter(
      (m) =>
        usable(m) &&
        (m.id.toLowerCase() === lower || m.id.toLowerCase().endsWith(`/${lower}`) || m.offers.some((o) => o.upstreamModel.toLowerCase() === lower)),
    )
    .map((m) => `'${m.id}'`);
  const listed = `Model ids are '<family>/<model>', as GET ${variant === 'b' ? '/alt/v1' : '/v1'}/models lists them.`;
  if (meant.length > 0 && meant.length <= 3) return ` Did you mean ${meant.join(' or ')}? ${listed}`;
  return ` ${listed}`;
}
