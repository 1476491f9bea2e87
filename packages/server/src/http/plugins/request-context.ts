import { H } from '@gw/schema';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { GatewayError } from '../../errors/gateway-error.js';
import { kGatewayRequest, type ResponseOfRequest } from '../context.js';
import { refusedBeforeContinue } from '../expect-continue.js';
import { hostError } from '../host-header.js';
import { lingerOnClose } from '../lingering-close.js';
import { UnsentAnswers } from '../send-timeout.js';
import { serverTiming } from '../server-timing.js';
import type { Services } from '../services.js';
import { leftBeforeAnswer } from '../upstream-call.js';
import { logClientLeft, recordClientGone } from './usage-recording.js';

/**
 * Answered by a draining instance on a connection it already had (routes/ops.ts): /readyz says it is draining, a scrape
 * still sees the requests left. /healthz is not: a load balancer's check on a kept connection must fail at once.
 */
const ANSWERED_WHILE_DRAINING = new Set(['/readyz', '/metrics']);

/**
 * Every request gets our own X-Request-Id, a state object, a Server-Timing
 * header that splits the gateway's own time from the upstream's, and a
 * line in the metrics.
 */
export function registerRequestContext(app: FastifyInstance, services: Services): void {
  app.decorateRequest('gw', null as never);
  const unsentAnswers = new UnsentAnswers(services.config.sendTimeoutMs);
  app.addHook('onClose', (_app, done) => {
    unsentAnswers.close();
    done();
  });
  // Callback-style hooks: they do no I/O, and an async hook costs a promise and a microtask hop per request.
  app.addHook('onRequest', (request, reply, done) => {
    request.gw = {
      variant: 'a',
      startedAt: performance.now(),
      upstreamMs: 0,
      upstreamCalls: 0,
      key: null,
      usage: null,
      usageDone: null,
      errorCode: null,
      reservation: null,
      failoverHold: null,
      limit: null,
      counted: false,
      countedModel: null,
      outlivesClient: false,
      streaming: false,
      answering: false,
      leftUnlogged: false,
      answeredRaw: null,
      bodyBytes: 0,
      exactIntegers: null,
      answerBytes: 0,
    };
    (reply.raw as ResponseOfRequest)[kGatewayRequest] = request;
    reply.header(H.requestId, request.id);
    services.lifecycle.inFlight++;
    const watched = unsentAnswers.watch(reply.raw, request.log);
    reply.raw.once('close', () => {
      services.lifecycle.inFlight--;
      services.bodyMemory.release(request.gw.bodyBytes, request.gw.answerBytes);
      unsentAnswers.forget(watched);
      const ms = performance.now() - request.gw.startedAt;
      const raw = request.gw.answeredRaw;
      // Answered on the connection itself (its body not received in time): not a client that left.
      if (raw !== null)
        request.log.info({ res: { statusCode: raw, request }, responseTime: ms }, 'request completed: answered on its connection, which is closed');
      const gone = raw === null && leftBeforeAnswer(reply.raw);
      if (gone) {
        recordClientGone(services, request);
        // A request that may run on (a stream past its first event, a keyed request not yet answered, whose handler may
        // not have reached its upstream call) is billed when it ends: its line waits for that, to say what it bills.
        if (request.gw.streaming || (!request.gw.answering && request.headers[H.idempotencyKey] !== undefined)) request.gw.leftUnlogged = true;
        else logClientLeft(request, reply);
      }
      // Here rather than in onResponse, which neither a client that left nor a stream that writes its own answer reaches.
      const status = raw ?? (gone ? 499 : reply.raw.statusCode);
      services.metrics.observeRequest(request.routeOptions.url ?? 'unmatched', request.gw.variant, status, ms / 1000);
    });
    // Refused before its body was asked for (Expect: 100-continue): answered here, as any refusal, timed from its head.
    const refused = refusedBeforeContinue(request.raw);
    if (refused !== undefined) {
      request.gw.startedAt = refused.startedAt;
      done(refused.error);
      return;
    }
    // No Host on HTTP/1.1, or two (RFC 9112: 400), in the envelope rather than Node's bare answer.
    const badHost = hostError(request.raw);
    if (badHost !== null) {
      done(badHost);
      return;
    }
    // A request that reaches a draining instance on a connection it already had: the envelope, a wait, and the connection closed.
    if (services.lifecycle.draining && !ANSWERED_WHILE_DRAINING.has(request.routeOptions.url ?? '')) {
      done(
        new GatewayError('shutting_down', 'This gateway instance is shutting down; send the request again (another instance answers it).', { retryAfterS: 1 }),
      );
      return;
    }
    done();
  });
  app.addHook('onSend', (request, reply, payload, done) => {
    // Its client gone, a keyed request's answer is ready: its usage draft has what it bills (a stream's, once it ends).
    request.gw.answering = true;
    if (request.gw.leftUnlogged && !request.gw.streaming) logClientLeft(request, reply);
    // An answer decided from the head alone (a 401, a 415) is given while Node's parser is still in that head, whose
    // body, if small, came in the same read: one turn on the parser has taken it, and whether any is left unread is
    // known then (a client sending bad-key requests on one connection kept it). Only answers given before their body.
    if (!request.raw.complete && mayCarryBody(request.raw.headers)) {
      setImmediate(() => {
        setAnswerHeaders(services, request, reply);
        done(null, payload);
      });
      return;
    }
    setAnswerHeaders(services, request, reply);
    done(null, payload);
  });
}

/**
 * What every answer gets as it goes out (the onSend hook, or a route that
 * writes its answer itself): Server-Timing, and `connection: close` while
 * draining or when the request's body was not read to its end, and only then
 * (sendError takes off the one Fastify sets on a body parser error).
 */
export function setAnswerHeaders(services: Services, request: FastifyRequest, reply: FastifyReply): void {
  reply.header(H.serverTiming, serverTiming(performance.now() - request.gw.startedAt, request.gw.upstreamMs));
  // While draining, close each connection after its answer so shutdown is not held by keep-alive;
  // and an answer given before its request's body ended (a refused upload) closes rather than reads the rest.
  // `complete` is still false for a request without a body while the parser is in the same turn as its head (an
  // answer given from a synchronous hook: a 401, a 404): nothing of it is left to read, so the connection stays open.
  const bodyUnread = !request.raw.complete && mayCarryBody(request.raw.headers);
  if (bodyUnread) lingerOnClose(request.raw);
  if (services.lifecycle.draining || bodyUnread) {
    reply.header('connection', 'close');
    reply.removeHeader('keep-alive');
  }
}

/** RFC 9112 6.3: a request has a body only when it carries Transfer-Encoding or a non-zero Content-Length. */
function mayCarryBody(headers: FastifyRequest['headers']): boolean {
  if (headers['transfer-encoding'] !== undefined) return true;
  const length = headers['content-length'];
  return length !== undefined && length.trim() !== '0';
}
