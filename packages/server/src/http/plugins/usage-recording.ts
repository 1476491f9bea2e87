import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { warnOnFailure } from '../../lib/error-summary.js';
import type { Services } from '../services.js';
import { leftBeforeAnswer } from '../upstream-call.js';

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

/** nginx's status for a request whose client closed the connection before the answer. */
export const CLIENT_CLOSED_STATUS = 499;

/**
 * The client closed the connection before its answer was written: the
 * response will never finish (no onResponse), so the request is recorded
 * now, with what it had cost so far (0 unless the upstream had answered),
 * and its budget hold settled. A stream that already started is not here:
 * its session records it when the upstream ends.
 */
export function recordClientGone(services: Services, request: FastifyRequest): void {
  if (request.gw.outlivesClient || (request.gw.usage === null && request.gw.reservation === null)) return;
  request.gw.errorCode = 'client_closed';
  record(services, request, CLIENT_CLOSED_STATUS);
}

/**
 * A request that outlived its client (X-Idempotency-Key) and whose answer is now ready: recorded as the client's
 * leaving, at what it cost, since no onResponse comes for an answer nobody takes. A stream that began is its
 * session's to record (its draft is off the request).
 */
export function recordOutlivedClient(services: Services, request: FastifyRequest, reply: FastifyReply): void {
  if (!request.gw.outlivesClient) return;
  // Its answer is ready: from here on it is recorded as any request, when its answer ends or its client leaves during it
  // (a slow reader's answer of megabytes), where a leave then found it still running on and recorded it nowhere.
  request.gw.outlivesClient = false;
  if (leftBeforeAnswer(reply.raw)) recordClientGone(services, request);
}

/**
 * The end line of a request whose client left before its answer ended: Fastify's "request completed" line needs a
 * finished answer, and without this one the request's log would stop at its start. Its head sent (a stream past its
 * first event), the client had part of its answer: a 499 all the same, as in the metrics. Written when the client left,
 * or, for a request that runs on (`leftUnlogged`), once its answer is ready or its stream ends, with what it bills.
 */
export function logClientLeft(request: FastifyRequest, reply: FastifyReply): void {
  request.gw.leftUnlogged = false;
  const msg = reply.raw.headersSent
    ? 'request completed: the client left during its answer, part of it sent'
    : 'request completed: the client left before its answer';
  request.log.info({ res: { statusCode: 499, request }, responseTime: performance.now() - request.gw.startedAt }, msg);
}

function recordUsage(services: Services, request: FastifyRequest, reply: FastifyReply): void {
  record(services, request, reply.statusCode);
}

/** Records the request once: its draft and hold are taken off it. */
function record(services: Services, request: FastifyRequest, status: number): void {
  const { key, usage, reservation, failoverHold } = request.gw;
  request.gw.usage = null;
  // A stream's draft went to its session (and to usageDone) before this hook ran: usage is null here then.
  if (usage) request.gw.usageDone = usage;
  request.gw.reservation = null;
  request.gw.failoverHold = null;
  if (reservation) {
    services.ledger.settle(reservation, usage?.cost ?? 0).catch(warnOnFailure(request.log, 'budget settle failed'));
  }
  // After the settle, which carries the cost the failover hold kept room for.
  if (failoverHold) {
    services.ledger.release(failoverHold).catch(warnOnFailure(request.log, 'budget release failed'));
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
    status,
    errorCode: request.gw.errorCode,
    streamed: usage.streamed,
    createdAt: new Date(services.dbClock.nowMs()),
  });
}

/**
 * The completion tokens a chat answer is billed: the provider's count, but never more than the request allows
 * (`max_tokens` times `n`, which its budget hold covered); a count above that is billed at the cap, and said so.
 */
export function billedCompletionTokens(request: FastifyRequest, provider: string, reported: number, cap: number): number {
  if (reported <= cap) return reported;
  request.log.warn(
    { provider, reportedCompletionTokens: reported, billedCompletionTokens: cap },
    "completion tokens reported above the request's cap: billed at the cap",
  );
  return cap;
}
