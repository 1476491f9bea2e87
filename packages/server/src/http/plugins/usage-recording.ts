import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Services } from '../services.js';

/** One usage record per authenticated model request, success or not, written in batches. */
export function registerUsageRecording(app: FastifyInstance, services: Services): void {
  app.addHook('onResponse', (request, reply, done) => {
    try {
      recordUsage(services, request, reply);
    } finally {
      done();
    }
  });
}

function recordUsage(services: Services, request: FastifyRequest, reply: FastifyReply): void {
  const { key, usage, reservation } = request.gw;
  if (reservation) {
    services.ledger.settle(reservation, usage?.cost ?? 0).catch((err: unknown) => request.log.warn({ err }, 'budget settle failed'));
  }
  if (!key || !usage) return;
  services.usage.record({
    requestId: request.id,
    keyId: key.id,
    workspaceId: key.workspaceId,
    kind: usage.kind,
    model: usage.model,
    provider: usage.provider,
    promptTokens: usage.promptTokens,
    completionTokens: usage.completionTokens,
    totalTokens: usage.promptTokens + usage.completionTokens,
    units: usage.units,
    cost: usage.cost,
    latencyMs: Math.round(performance.now() - request.gw.startedAt),
    status: reply.statusCode,
    errorCode: request.gw.errorCode,
    streamed: usage.streamed,
    createdAt: new Date(),
  });
}
