import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import { H } from '@gw/schema';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { GatewayError } from '../../errors/gateway-error.js';
import { UpstreamError } from '../../errors/upstream-error.js';
import { errorSummary } from '../../lib/error-summary.js';
import { redactSecrets } from '../../lib/redact.js';
import { RelayGate } from '../../providers/chunk-relay.js';
import { functionsStream } from '../../providers/legacy-functions.js';
import type { ChatBody, ChatStream } from '../../providers/types.js';
import { estimatedUsage } from '../../providers/usage-estimate.js';
import { executePlan } from '../../routing/execute.js';
import type { RouteOptions } from '../../routing/plan.js';
import type { Offer } from '../../routing/registry.js';
import { LiveFrames } from '../../streaming/live-frames.js';
import { StreamEndedByGateway, type StreamOutcome } from '../../streaming/session.js';
import { parseEventId } from '../../streaming/sse-format.js';
import { headWhenPiped, includeUsage, sseFrames } from '../../streaming/sse-frames.js';
import { RECORD_PATIENCE_MS, ResumeBufferUnavailableError, type StreamEvent, type StreamMeta, SYNTHETIC_SEQ } from '../../streaming/types.js';
import { heldFor } from '../budget.js';
import { newUsageDraft } from '../context.js';
import { closeAfterStream } from '../drain-close.js';
import { applyRateLimit, countUncounted } from '../plugins/rate-limit.js';
import { setAnswerHeaders } from '../plugins/request-context.js';
import { billedCompletionTokens, CLIENT_CLOSED_STATUS, logClientLeft, recordClientGone } from '../plugins/usage-recording.js';
import { kPacedByClient } from '../send-timeout.js';
import type { Services } from '../services.js';
import { callUpstream, clientAbortSignal, leftBeforeAnswer, routingHeaders } from '../upstream-call.js';
import { billedPromptTokens, promptTokensAtMost } from '../usage-bounds.js';

interface Started {
  upstream: ChatStream;
  source: RelayGate;
  /** When the attempt that opened the stream began: the stream's upstream time to its end counts from here. */
  calledAt: number;
}

function streamHeaders(reply: FastifyReply): void {
  reply.header('content-type', 'text/event-stream; charset=utf-8');
  reply.header('cache-control', 'no-cache');
  reply.header(H.accelBuffering, 'no');
}

/**
 * Starts an upstream stream along the plan. An offer counts as started
 * only once its answer began (RelayGate: the first chunk with content,
 * reasoning, a tool call, a finish_reason or usage, not the role chunk
 * that opens it), so a provider that fails before that still fails over.
 */
export async function startStream(
  services: Services,
  request: FastifyRequest,
  reply: FastifyReply,
  args: {
    body: ChatBody;
    plan: Offer[];
    /** What the budget holds for an offer of the plan. */
    holdCost: (offer: Offer) => number;
    /** The offers the plan was made from. */
    offers: readonly Offer[];
    options: RouteOptions;
    promptTokens: number;
    /** The most completion tokens billed, given the prompt's count (the provider's, else the estimate). */
    billedCap: (promptTokens: number) => number;
    perChoice: number;
    choices: number;
    /** The client gave `functions`: its chunks go out in the functions API's shape. */
    functions: boolean;
  },
) {
  const { body, plan, options } = args;
  const model = request.gw.usage?.model as string;
  // Until its first event is written, a client that leaves never learnt the stream's id and cannot resume it: the
  // upstream is stopped. With an idempotency key it goes on (a retry with the key gets it whole); a shutdown stops either.
  const gone = clientAbortSignal(services, reply, !request.gw.outlivesClient);
  const result = await executePlan(
    plan,
    (offer) =>
      callUpstream(services, request, offer, async (adapter): Promise<Started> => {
        const calledAt = performance.now();
        const opened = await adapter.chatStream(body, { upstreamModel: offer.upstreamModel, requestId: request.id, signal: gone, maxTokens: args.perChoice });
        const upstream = args.functions ? functionsStream(opened) : opened;
        const source = new RelayGate(
          upstream,
          () => new UpstreamError({ kind: 'protocol', provider: offer.provider, message: `${offer.provider} ended the stream before its answer began` }),
        );
        try {
          await source.first;
          return { upstream, source, calledAt };
        } catch (err) {
          upstream.abort();
          throw err;
        }
      }),
    { health: options.stats, offers: args.offers, pin: options.pin, maxHops: options.maxHops, cost: heldFor(request, args.holdCost) },
  ).catch((err: unknown) => {
    gone.disarm();
    // A stream that would have outlived its client never began: it is recorded as the client's leaving, as any other.
    if (request.gw.outlivesClient && leftBeforeAnswer(reply.raw)) {
      request.gw.outlivesClient = false;
      recordClientGone(services, request);
    }
    throw err;
  });
  if (gone.aborted) {
    result.value.upstream.abort();
    // The shutdown's answer; or nobody reads this one, the request recorded when its client left (usage-recording.ts).
    if (gone.reason instanceof GatewayError) throw gone.reason;
    throw new GatewayError('upstream_failed', 'The client closed the connection before the stream began.');
  }
  gone.disarm();
  const key = request.gw.key;
  if (!key) throw new GatewayError('unauthorized', 'Missing API key.');
  // The session bills the stream when the upstream ends, not when the client leaves.
  const reservation = request.gw.reservation;
  const draft = request.gw.usage;
  request.gw.reservation = null;
  request.gw.usage = null;
  request.gw.usageDone = draft;
  request.gw.streaming = true;
  // Not awaited: the resume record must not delay the first chunk. It is written no later than the
  // stream's first event (Redis: in the same call); if it fails, only resume degrades.
  const routing = { provider: result.offer.provider, region: result.offer.region, strategy: options.strategy, hops: result.hops };
  const owner = { keyId: key.id, model, routing };
  services.streams.create(request.id, owner).catch((err: unknown) => {
    request.log.warn({ err: errorSummary(err) }, 'stream resume record not written; resume unavailable for this stream');
  });
  const { upstream, source, calledAt } = result.value;
  const bodyBytes = request.gw.bodyBytes;
  const session = services.sessions.start({
    streamId: request.id,
    owner,
    model,
    upstream,
    source,
    store: services.streams,
    graceMs: services.config.streamGraceS * 1000,
    promptTokens: args.promptTokens,
    choices: args.choices,
    billedCap: args.billedCap,
    promptAtMost: (reported) => promptTokensAtMost(reported, bodyBytes, args.body),
    onEnd: (outcome: StreamOutcome) => {
      // A provider that failed after its answer began: no failover is possible then, but the operator is told, as of any failed attempt.
      const byGateway = outcome.error instanceof StreamEndedByGateway ? outcome.error : null;
      if (byGateway?.code === 'stream_buffer_exceeded') {
        request.log.warn({ provider: result.offer.provider }, byGateway.message);
      } else if (outcome.error && !byGateway && !outcome.abandoned) {
        warnUpstreamFailed(request, result.offer, outcome.error, 'mid-stream');
      } else if (outcome.lateFailure) {
        // The answer was whole: the client got a normal end and the request is a success, but the provider misbehaved.
        warnUpstreamFailed(request, result.offer, outcome.lateFailure, 'after its answer was whole, before [DONE]');
      }
      const neverSent = !reply.raw.headersSent && leftBeforeAnswer(reply.raw);
      const estimate = estimatedUsage(args.promptTokens, outcome.relayedChars, args.billedCap(args.promptTokens));
      // The provider's prompt count, at most what the request's bytes could tokenize into (usage-bounds.ts).
      const prompt = outcome.usage
        ? billedPromptTokens(request.log, result.offer.provider, outcome.usage.prompt_tokens, bodyBytes, args.body)
        : estimate.prompt_tokens;
      const reported = outcome.usage?.completion_tokens ?? estimate.completion_tokens;
      const completion = billedCompletionTokens(request, result.offer.provider, reported, args.billedCap(prompt));
      const cost = (prompt * result.offer.pricing.prompt_per_1m + completion * result.offer.pricing.completion_per_1m) / 1_000_000;
      if (reservation) services.ledger.settle(reservation, cost).catch(() => {});
      const errorCode = neverSent ? 'client_closed' : byGateway ? byGateway.code : outcome.error ? 'upstream_failed' : null;
      // The end line reads what is billed and the failure from the request: written now if the client has left, else
      // once the last event has gone out.
      if (draft) {
        draft.promptTokens = prompt;
        draft.completionTokens = completion;
      }
      if (errorCode !== null) request.gw.errorCode = errorCode;
      services.usage.record({
        requestId: request.id,
        keyId: key.id,
        workspaceId: key.workspaceId,
        kind: 'chat',
        model: draft?.model ?? model,
        provider: result.offer.provider,
        promptTokens: prompt,
        completionTokens: completion,
        totalTokens: prompt + completion,
        units: 0,
        cost,
        latencyMs: Math.round(performance.now() - request.gw.startedAt),
        // A client that left before the first event (a keyed stream runs on for its retry) was sent nothing: the 499
        // its metrics and log say, at the whole cost, as a keyed request of any other kind.
        status: neverSent ? CLIENT_CLOSED_STATUS : 200,
        errorCode,
        streamed: true,
        createdAt: new Date(services.dbClock.nowMs()),
      });
      request.gw.streaming = false;
      if (request.gw.leftUnlogged) logClientLeft(request, reply);
      // A stream stopped because its client left and did not come back is no failure of the provider's.
      const upstreamOutcome = byGateway ? 'stream_cut' : outcome.abandoned ? 'stream_abandoned' : outcome.error ? 'stream_error' : 'stream_ok';
      services.metrics.observeUpstream(result.offer.provider, upstreamOutcome, (performance.now() - calledAt) / 1000);
    },
  });
  routingHeaders(reply, request, routing);
  return sendFrames(
    services,
    request,
    reply,
    request.id,
    new LiveFrames(session, 0, includeUsage(body), services.config.streamHeartbeatMs, request.gw.variant),
  );
}

/** The operator's warning of a provider's failure in a stream that started: what it said in full, secrets redacted. */
function warnUpstreamFailed(request: FastifyRequest, offer: Offer, err: Error, when: string): void {
  request.log.warn(
    { provider: offer.provider, upstreamModel: offer.upstreamModel, kind: err instanceof UpstreamError ? err.kind : 'error' },
    `upstream failed ${when}: ${redactSecrets(err instanceof UpstreamError ? err.detail : err.message)}`,
  );
}

/**
 * Picks up a stream after `Last-Event-ID`: the buffered rest, then the live rest; no upstream call, no charge.
 * `modelId`: the model the request names, as the registry reads the id (`:eu` or not); only a stream of that model is
 * resumed. `modelGone`: the request names a model the registry no longer holds, or its key's workspace no longer
 * enables; only its key's stream of that model, begun before, is resumed, and anything else is answered `refusal` (the
 * model's own error) as before.
 */
export async function resumeStream(
  services: Services,
  request: FastifyRequest,
  reply: FastifyReply,
  lastEventId: string,
  body: ChatBody,
  modelId: string,
  modelGone?: { refusal: unknown },
) {
  const parsed = parseEventId(lastEventId);
  if (!parsed && modelGone) throw modelGone.refusal;
  // No event of this gateway has such an id (`<request id>:<n>`): the header is wrong, not the stream gone, and a
  // 404 would have a client wait for a stream to reappear or start over thinking it expired.
  if (!parsed) {
    throw new GatewayError(
      'validation',
      `Invalid header: 'Last-Event-ID' must be the id of an event of this gateway's stream (<stream id>:<n>, as req_…:12), not '${lastEventId.slice(0, 80)}'.`,
      { param: 'Last-Event-ID' },
    );
  }
  const key = request.gw.key;
  // A stream this instance relays is resumed from its session, whether or not the shared buffer has it.
  const local = services.sessions.get(parsed.streamId);
  const meta = local?.owner ?? (await sharedMeta(services, parsed.streamId));
  if (modelGone) {
    if (!meta || !key || meta.keyId !== key.id || meta.model !== modelId) throw modelGone.refusal;
    // Left uncounted as a model_not_found; a resume counts as any (docs/streaming.md).
    countUncounted(services, request);
    await applyRateLimit(request, reply);
  }
  // Another key's stream looks exactly like an unknown one.
  if (!meta || !key || meta.keyId !== key.id) {
    throw new GatewayError(
      'stream_not_found',
      `No resumable stream for Last-Event-ID '${lastEventId.slice(0, 80)}': it is unknown, expired, or not this key's.`,
      { param: 'Last-Event-ID' },
    );
  }
  // A resume re-sends the request that started the stream: another model's name would get one model's answer as another's.
  if (meta.model !== modelId) {
    throw new GatewayError(
      'validation',
      `Last-Event-ID '${lastEventId.slice(0, 80)}' is of a stream of '${meta.model}', not of '${body.model.slice(0, 200)}': a resume names the model its stream was started with.`,
      { param: 'model' },
    );
  }
  request.gw.usage = null;
  // Not billed again (its stream is): its end log line names the stream's model and provider, and the stream itself.
  request.gw.usageDone = { ...newUsageDraft('chat', meta.model), provider: meta.routing?.provider ?? null, streamed: true, resumes: parsed.streamId };
  if (meta.routing) routingHeaders(reply, request, meta.routing);
  const heartbeatMs = services.config.streamHeartbeatMs;
  if (local)
    return sendFrames(services, request, reply, parsed.streamId, new LiveFrames(local, parsed.seq, includeUsage(body), heartbeatMs, request.gw.variant));
  // Another instance's stream: read from the shared buffer until the client goes, or stops taking it for
  // GW_SEND_TIMEOUT_MS (its read holds a Redis connection, whether or not the stream still runs).
  (reply.raw as ServerResponse & { [kPacedByClient]?: boolean })[kPacedByClient] = true;
  const abort = new AbortController();
  reply.raw.once('close', () => abort.abort());
  const end = { seen: false };
  const events = noteEnd(services.streams.follow(parsed.streamId, parsed.seq, abort.signal), end);
  headWhenPiped(reply.raw);
  return sendFrames(
    services,
    request,
    reply,
    parsed.streamId,
    Readable.from(sseFrames(events, parsed.streamId, includeUsage(body), heartbeatMs, request.gw.variant), { objectMode: false }),
    end,
  );
}

/** The events as they come, `end.seen` set once the stream's own last event passed (not an error event of the gateway's). */
async function* noteEnd(events: AsyncIterable<StreamEvent>, end: { seen: boolean }): AsyncGenerator<StreamEvent> {
  for await (const e of events) {
    if (e.seq !== SYNTHETIC_SEQ && (e.kind === 'done' || e.kind === 'error')) end.seen = true;
    yield e;
  }
}

/**
 * The stream's record in the resume buffer; a buffer that cannot be read is a 503 to retry, not a 500.
 * With Redis, a record not found is looked for again for up to RECORD_PATIENCE_MS: the instance relaying the
 * stream may be retrying its first write through a stall, and a 404 would tell the client to give up.
 */
async function sharedMeta(services: Services, streamId: string): Promise<StreamMeta | null> {
  const until = performance.now() + (services.config.redisUrl ? RECORD_PATIENCE_MS : 0);
  for (;;) {
    let meta: StreamMeta | null;
    try {
      meta = await services.streams.meta(streamId);
    } catch (err) {
      throw new GatewayError('store_unavailable', 'The stream resume buffer cannot be read right now; retry shortly.', {
        retryAfterS: 1,
        cause: new ResumeBufferUnavailableError(err),
      });
    }
    if (meta || performance.now() >= until) return meta;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

/** `end`: for frames read from the shared buffer, whether they held the stream's own last event. */
function sendFrames(services: Services, request: FastifyRequest, reply: FastifyReply, streamId: string, frames: Readable, end?: { seen: boolean }) {
  streamHeaders(reply);
  // 'finish' with the stream's last event among the frames: the client has it whole, its buffer can go soon. An answer
  // that ended otherwise (an error event of the gateway's: this instance shutting down, the relaying one gone; or
  // nothing, resumed past the end) is resumed again, maybe while the stream still runs, and keeps the buffer as it is.
  reply.raw.once('finish', () => {
    if (frames instanceof LiveFrames ? frames.sentEnd : end?.seen === true) services.streams.delivered(streamId);
    // Its head went out with keep-alive before the drain began (an answer begun after says connection: close).
    if (services.lifecycle.draining) closeAfterStream(request.raw.socket);
  });
  if (frames instanceof LiveFrames && writesItself(request)) {
    // What the onSend hooks would do: an idempotency claim (settled there) takes the path below instead.
    setAnswerHeaders(services, request, reply);
    reply.hijack();
    frames.writeTo(reply.raw, reply.statusCode, reply.getHeaders() as OutgoingHttpHeaders);
    return reply;
  }
  if (frames instanceof LiveFrames) frames.sendThrough(reply.raw);
  return reply.send(frames);
}

/**
 * Whether the stream can be written without Fastify's send: no idempotency
 * key (its answer is stored in an onSend hook) and the limiter's decision
 * already applied (its onSend check would otherwise apply it).
 */
function writesItself(request: FastifyRequest): boolean {
  return request.headers[H.idempotencyKey] === undefined && request.gw.limit === null;
}
