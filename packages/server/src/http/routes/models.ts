import { ModelA, ModelB, type ModelKind, ModelListA, ModelListB, ModelParams, ModelsQueryA, ModelsQueryB, SlashedModelParams } from '@gw/schema';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { GatewayError } from '../../errors/gateway-error.js';
import type { RegistryModel } from '../../routing/registry.js';
import { enabledModels, modelHint, notReadYet, notServedNow } from '../model-access.js';
import { emptyParamError } from '../no-route.js';
import { repeatedQueryParam } from '../query-values.js';
import type { Services } from '../services.js';
import { filterModelsA, modelViewA } from '../variants/a.js';
import { filterModelsB, modelViewB, type ModelsQueryB as QueryB } from '../variants/b.js';
import type { RouteDocs } from './docs.js';

/** GET /v1/models and /v1/models/{id}: never counted against the rate limit, never billed. */
export function modelsRoutes(app: FastifyInstance, services: Services, docs: RouteDocs): void {
  const isA = docs.variant === 'a';
  app.get(
    '/models',
    {
      config: { uncounted: true },
      preValidation: oneValueEach(Object.keys((isA ? ModelsQueryA : ModelsQueryB).properties)),
      schema: docs.operation('listModels', 'List models', { querystring: isA ? ModelsQueryA : ModelsQueryB, response: { 200: isA ? ModelListA : ModelListB } }),
    },
    async (request) => {
      const all = services.registry.list();
      if (isA) return { object: 'list', data: filterModelsA(all, request.query as { kind?: ModelKind }).map(modelViewA) };
      const enabled = await enabledModels(services, request);
      return { object: 'list', data: filterModelsB(all, request.query as QueryB, enabled).map(modelViewB) };
    },
  );
  const response = { 200: isA ? ModelA : ModelB };
  // `/models/` and `/models//x` reach these routes with an empty id: the route meant, as a 404 (docs/errors.md).
  const noEmptyParam = async (request: FastifyRequest) => {
    const err = emptyParamError(app, request);
    if (err) throw err;
  };
  app.get(
    '/models/:id',
    {
      config: { uncounted: true },
      preValidation: noEmptyParam,
      schema: docs.operation('getModel', 'Get one model (the slash in the id is encoded as %2F)', { params: ModelParams, response }),
    },
    (request) => oneModel(services, request, isA, (request.params as { id: string }).id),
  );
  // The same model with its slash unencoded: a reverse proxy that decodes %2F (nginx does, given a URI) sends this path.
  app.get(
    '/models/:family/:model',
    {
      config: { uncounted: true },
      preValidation: noEmptyParam,
      schema: docs.operation('getModelSlashed', 'Get one model, the slash in its id unencoded', { params: SlashedModelParams, response }),
    },
    (request) => {
      const { family, model } = request.params as { family: string; model: string };
      return oneModel(services, request, isA, `${family}/${model}`);
    },
  );
}

/**
 * A filter named twice is told it takes one value, rather than that it is not a string; a parameter that is no filter
 * is told the list's filters (A's `kind` sent to B, B's `family` to A), rather than only that it is not known.
 */
function oneValueEach(filters: string[]) {
  return async (request: FastifyRequest): Promise<void> => {
    const repeated = repeatedQueryParam(request.query, filters, 'a filter');
    if (repeated) throw repeated;
    for (const name in request.query as object) {
      if (!filters.includes(name)) {
        throw new GatewayError('validation', `Invalid querystring: '${name}' is not a filter of this list; its filters are ${filters.join(', ')}.`, {
          param: name,
        });
      }
    }
  };
}

async function oneModel(services: Services, request: FastifyRequest, isA: boolean, id: string) {
  const model = services.registry.get(id);
  // B's list leaves retired models out; asked for one by id, B says it is retired, as a chat request naming it is told.
  const enabled = isA ? null : await enabledModels(services, request);
  const visible = model && (isA || filterModelsB([{ ...model, deprecated: false }], {}, enabled).length > 0);
  if (model && enabled !== null && !enabled.has(model.id)) {
    // As a request naming it is told (http/model-access.ts): the key's own workspace leaves it out, which its owner can change.
    throw new GatewayError('model_not_found', `The model '${id}' is not enabled for this workspace.`, { param: 'id' });
  }
  const unlisted = model ? undefined : services.registry.unlistedModel(id);
  if (unlisted && (enabled === null || enabled.has(unlisted.id)) && (isA || unlisted.kind !== 'embedding' || unlisted.beta)) {
    // As a request naming it is told: configured, but no provider lists it right now, or one's list was never read.
    const unread = services.registry.unreadable(id);
    if (unread) throw notReadYet(id, unread.providers, isA ? 'a' : 'b');
    throw notServedNow(id, unlisted.providers, isA ? 'a' : 'b', 'id');
  }
  if (!model || !visible) {
    // The hint names only a model the variant's list shows, as a chat request's hint names one it could use.
    const listed = (m: RegistryModel) => (isA ? !m.deprecated : filterModelsB([m], {}, enabled).length > 0);
    throw new GatewayError('model_not_found', `The model '${id}' does not exist.${modelHint(services, id, isA ? 'a' : 'b', listed)}`, { param: 'id' });
  }
  if (model.deprecated) throw new GatewayError('model_deprecated', `The model '${id}' has been retired upstream.`, { param: 'id' });
  return isA ? modelViewA(model) : modelViewB(model);
}
