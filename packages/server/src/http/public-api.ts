import { H, type Variant } from '@gw/schema';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { sendError } from './errors.js';
import { noRouteError } from './no-route.js';
import { registerApiKeyAuth } from './plugins/api-key-auth.js';
import { registerIdempotency } from './plugins/idempotency.js';
import { refuseNonUtf8Json } from './plugins/json-charset.js';
import { countRefusal, errorAfterRateLimit, registerRateLimit } from './plugins/rate-limit.js';
import { registerUsageRecording } from './plugins/usage-recording.js';
import { chatCompletionsRoute } from './routes/chat-completions.js';
import { routeDocs } from './routes/docs.js';
import { embeddingsRoute } from './routes/embeddings.js';
import { modelsRoutes } from './routes/models.js';
import { notImplementedRoutes } from './routes/not-implemented.js';
import { rerankRoute } from './routes/rerank.js';
import { transcriptionsRoute } from './routes/transcriptions.js';
import type { Services } from './services.js';

/**
 * One variant of the public API (mounted at /v1 and /alt/v1): the same routes, its own error codes, headers and
 * model fields. `cohereV2`: the mount at /v2 and /alt/v2, with rerank only, for Cohere's v2 SDK.
 */
export async function publicApi(app: FastifyInstance, opts: { services: Services; variant: Variant; cohereV2?: boolean }): Promise<void> {
  const { services, variant } = opts;
  // Response schemas document the API; bodies are relayed as the provider shaped them, so no field is dropped.
  app.setSerializerCompiler(() => (data) => JSON.stringify(data));
  const answerError = (err: unknown, request: FastifyRequest, reply: FastifyReply) => {
    countRefusal(services, request, err);
    const waiting = errorAfterRateLimit(request, reply, err);
    if (!waiting) return sendError(err, request, reply, variant);
    return waiting.then((e) => {
      sendError(e, request, reply, variant);
    });
  };
  app.setErrorHandler(answerError);
  app.setNotFoundHandler((request, reply) => answerError(noRouteError(app, request, reply), request, reply));
  app.addHook('onRequest', (request, _reply, done) => {
    request.gw.variant = variant;
    // Traffic as the idle memory hand-back counts it: health checks and metrics scrapes do not keep the gateway busy.
    services.lifecycle.apiRequests++;
    // `Idempotency-Key` (the IETF draft's and Stripe's name) is the same key: read as X-Idempotency-Key from here on,
    // so a client that sends it is protected rather than silently not. Both at once are refused at the claim.
    const standard = request.headers[H.idempotencyKeyStandard];
    if (standard !== undefined && request.headers[H.idempotencyKey] === undefined) request.headers[H.idempotencyKey] = standard;
    done();
  });
  registerApiKeyAuth(app, services);
  refuseNonUtf8Json(app, services.bodyMemory);
  registerRateLimit(app, services);
  registerUsageRecording(app, services);
  registerIdempotency(app, services);
  if (opts.cohereV2) {
    // Cohere's current SDK (CohereClientV2) posts to {base}/v2/rerank, with a body /v1/rerank takes as it is.
    rerankRoute(app, services, routeDocs(variant, { idPrefix: 'cohere_v2_', tag: "Cohere's v2 path" }), '2');
    return;
  }
  const docs = routeDocs(variant);
  modelsRoutes(app, services, docs);
  chatCompletionsRoute(app, services, docs);
  embeddingsRoute(app, services, docs);
  rerankRoute(app, services, docs, '1');
  await transcriptionsRoute(app, services, docs);
  notImplementedRoutes(app, docs);
}
