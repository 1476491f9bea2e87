import { H, type ModelKind, wireError } from '@gw/schema';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { GatewayError, isGatewayError } from '../../errors/gateway-error.js';
import type { LimitDecision } from '../../limits/types.js';
import type { RegistryModel } from '../../routing/registry.js';
import { newUsageDraft } from '../context.js';
import { type EnabledModels, enabledModels } from '../model-access.js';
import { isMultipart } from '../multipart-spool.js';
import type { Services } from '../services.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** GET /models: never counted against the rate limit. */
    uncounted?: boolean;
    /**
     * The handler applies the limiter's decision itself, in the same wait as
     * its budget hold (see {@link applyRateLimit}); with Redis that makes
     * one round trip of two.
     */
    limitWithBudgetHold?: boolean;
    /** A model route: the kind of model it serves, under which a 429 answered before its handler drafted the usage is recorded. */
    usageKind?: ModelKind;
  }
}

/**
 * The per-key sliding window. The request is counted after authentication
 * (a 401 is never counted) and before body validation, so a bad body is
 * counted; a request naming a model that does not exist for the caller is
 * not (SPEC: Limits).
 *
 * The count is sent at once, and its decision is applied before anything
 * else can answer: in preHandler, before the idempotency key is claimed;
 * or, on routes marked `limitWithBudgetHold`, by the handler together with
 * its budget hold. An error answered before then (a bad body) waits for
 * the decision too, and a refusal wins over it, as when the limiter ran
 * alone first.
 */
export function registerRateLimit(app: FastifyInstance, services: Services): void {
  app.addHook('preValidation', (request, _reply, done) => {
    const key = request.gw.key;
    if (!key || request.routeOptions.config.uncounted) return done();
    const model = (request.body as { model?: unknown } | undefined)?.model;
    const count = (named: RegistryModel | null) => {
      countRequest(services, request, named);
      done();
    };
    if (typeof model !== 'string') return count(null);
    const found = modelFor(services, request, model);
    if (!(found instanceof Promise)) return found ? count(found) : done();
    found.then((m) => (m ? count(m) : done()), done);
  });
  app.addHook('preHandler', (request, reply, done) => {
    if (!request.gw.limit) return done();
    // An idempotency key is claimed only by a request the limiter let through.
    if (request.routeOptions.config.limitWithBudgetHold && request.headers[H.idempotencyKey] === undefined) return done();
    const applying = applyRateLimit(request, reply);
    if (!applying) return done();
    applying.then(() => done(), done);
  });
  // Every path of a `limitWithBudgetHold` route applies the decision; this catches one that did not.
  app.addHook('onSend', (request, reply, payload, done) => {
    const applying = applyRateLimit(request, reply);
    if (!applying) return done(null, payload);
    request.log.error({ route: request.routeOptions.url }, 'rate limit: an answer was sent before the limiter decision was applied');
    applying.then(
      () => done(null, payload),
      () => done(null, payload),
    );
  });
}

/** Counts a request the limiter left out for naming a model the key cannot use, once it is served after all (a resume). */
export function countUncounted(services: Services, request: FastifyRequest): void {
  if (!request.gw.counted) countRequest(services, request, null);
}

function countRequest(services: Services, request: FastifyRequest, named: RegistryModel | null): void {
  const key = request.gw.key;
  if (!key) return;
  request.gw.counted = true;
  request.gw.limit = services.limiter.hit(key.id, key.rateLimitRpm, request.id);
  request.gw.countedModel = named;
}

/**
 * An authenticated request refused without having been counted is counted as it is answered: one refused before
 * the count (a body that cannot be read: a 400 for an empty or invalid JSON body, a 413, a 415; a route still to
 * come, 501), or one left out for naming a model the key cannot use but refused for something else (a 400 for its
 * body). SPEC (Limits) leaves out only GET /models, a 401 and a 404 model_not_found; the limiter's own 429 (an upload
 * refused before it is read) is its decision, not a request to count again.
 */
export function countRefusal(services: Services, request: FastifyRequest, err: unknown): void {
  if (!request.gw?.key || request.gw.counted) return;
  // An uncounted route's 'No route' 404 (GET /v1/models/ reaches /models/:id with an empty id) is an unknown path: counted.
  if (request.routeOptions.config?.uncounted && !(isGatewayError(err) && err.code === 'not_found')) return;
  // What the caller reads as model_not_found (in B, a retired model's too) is never counted.
  if (isGatewayError(err) && (err.code === 'rate_limited' || wireError(err.code, request.gw.variant).code === 'model_not_found')) return;
  countRequest(services, request, null);
}

/**
 * Applies the limiter's decision (waiting for it if it is still on its
 * way): sets the rate limit headers, and refuses with 429 if the limiter
 * did. Returns a promise while there is something to wait for or a
 * refusal; undefined when there is nothing left to do (no count, already
 * applied, or an in-process decision that let the request through).
 */
export function applyRateLimit(request: FastifyRequest, reply: FastifyReply): Promise<void> | undefined {
  const pending = request.gw?.limit;
  if (!pending) return undefined;
  request.gw.limit = null;
  if (pending instanceof Promise) return pending.then((d) => applyDecision(reply, d));
  // An in-process decision: no promise unless it refuses.
  try {
    applyDecision(reply, pending);
    return undefined;
  } catch (refused) {
    return Promise.reject(refused);
  }
}

function applyDecision(reply: FastifyReply, d: LimitDecision): void {
  reply.headers(rateLimitHeaders(d));
  if (d.allowed) return;
  draftRefusal(reply.request);
  throw rateLimitedError(d);
}

/** The limiter's headers, which every counted answer carries. */
export function rateLimitHeaders(d: LimitDecision): Record<string, string> {
  return {
    [H.rateLimitLimit]: String(d.limit),
    [H.rateLimitRemaining]: String(d.remaining),
    [H.rateLimitReset]: String(d.resetS),
    [H.rateLimitEnforced]: String(d.enforced),
  };
}

/**
 * Takes the key's own count off an answer refused by another per-minute limit (the embeddings beta's): a 429 saying
 * `X-RateLimit-Remaining: 59` reads as a refusal with room left. `X-RateLimit-Enforced` stays (SPEC, fail-open rule).
 */
export function withoutKeyLimitCount(reply: FastifyReply): void {
  reply.removeHeader(H.rateLimitLimit);
  reply.removeHeader(H.rateLimitRemaining);
  reply.removeHeader(H.rateLimitReset);
}

/** The 429 of a limiter that refused (SPEC, Errors: the message names the limit). */
export function rateLimitedError(d: LimitDecision): GatewayError {
  return new GatewayError('rate_limited', `Rate limit exceeded (${d.limit} RPM)`, { retryAfterMs: d.waitMs });
}

/**
 * A 429 is recorded, at no cost, as any failure of a request naming a model the key may use (docs/decisions.md,
 * usage records): where the refusal comes before the handler drafted the usage (every route but chat without an
 * idempotency key), the draft is made here, for the model the request was counted for, if the route serves its kind.
 */
function draftRefusal(request: FastifyRequest): void {
  const model = request.gw.countedModel;
  if (request.gw.usage !== null || model === null || model.kind !== request.routeOptions.config.usageKind) return;
  request.gw.usage = newUsageDraft(model.kind, model.id);
}

/** The error to answer with: a refusal of the limiter, when its decision was still pending, wins over `err`. */
export function errorAfterRateLimit(request: FastifyRequest, reply: FastifyReply, err: unknown): Promise<unknown> | undefined {
  return applyRateLimit(request, reply)?.then(
    () => err,
    (refused: unknown) => refused,
  );
}

/**
 * On an upload route: an upload is counted once read, as any request; a key whose window is already full is refused
 * before it is read, so that a key over its limit cannot fill the upload spool, tens of MB a connection at a time.
 */
export function refuseUploadsOverLimit(scope: FastifyInstance, services: Services): void {
  scope.addHook('preParsing', (request, reply, payload, done) => {
    const key = request.gw.key;
    if (!key || request.routeOptions.config.uncounted || !isMultipart(request.headers['content-type'])) return done(null, payload);
    const refuseIfFull = (d: LimitDecision) => {
      if (d.allowed) return done(null, payload);
      try {
        applyDecision(reply, d);
        done(null, payload);
      } catch (refused) {
        done(refused as Error);
      }
    };
    const peeked = services.limiter.peek(key.id, key.rateLimitRpm);
    if (peeked instanceof Promise) peeked.then(refuseIfFull, () => done(null, payload));
    else refuseIfFull(peeked);
  });
}

/** The model, if the caller may use it (else null): at once when the caller's workspace is cached, else once it is read. */
function modelFor(services: Services, request: FastifyRequest, id: string): RegistryModel | null | Promise<RegistryModel | null> {
  const m = services.registry.get(id);
  if (!m) return null;
  // Variant B's embeddings are a beta of some models: to a B client the others do not exist on any route (its model list hides them).
  if (request.gw.variant === 'b' && m.kind === 'embedding' && !m.beta) return null;
  // A retired model is B's model_not_found too (A's 410 is counted).
  if (m.deprecated && request.gw.variant === 'b') return null;
  const allowed = (enabled: EnabledModels) => (enabled === null || enabled.has(m.id) ? m : null);
  const enabled = enabledModels(services, request);
  return enabled instanceof Promise ? enabled.then(allowed) : allowed(enabled);
}
