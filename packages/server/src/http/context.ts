import type { Variant } from '@gw/schema';
import type { ExactInteger } from '../lib/json-numbers.js';
import type { Reservation } from '../limits/budget-types.js';
import type { LimitDecision } from '../limits/types.js';
import type { RegistryModel } from '../routing/registry.js';
import type { ApiKeyRecord } from '../store/types.js';

/** What a request accumulates on its way through the pipeline. */
export interface RequestState {
  variant: Variant;
  /** performance.now() at arrival. */
  startedAt: number;
  /** Milliseconds spent waiting on upstream providers. */
  upstreamMs: number;
  /** Upstream attempts started (an idempotent answer is stored only once one was). */
  upstreamCalls: number;
  key: ApiKeyRecord | null;
  /** Set by model routes: the request is billable and gets a usage record. */
  usage: UsageDraft | null;
  /** The draft once recorded or handed to its stream's session (`usage` is then null): what the end log line names. */
  usageDone: UsageDraft | null;
  errorCode: string | null;
  /** The budget hold taken at admission, settled when the response ends. */
  reservation: Reservation | null;
  /** More of the budget held for a failover after a partly paid attempt (http/budget.ts), let go when the request is recorded. */
  failoverHold: Reservation | null;
  /** The rate limiter's decision while it is on its way, until it is applied (see plugins/rate-limit.ts). */
  limit: LimitDecision | Promise<LimitDecision> | null;
  /** Whether the request has been counted against its key's rate limit (once, however it ends). */
  counted: boolean;
  /** The model a counted request named: a 429 answered before the handler's usage draft is recorded under it. */
  countedModel: RegistryModel | null;
  /**
   * A request with an idempotency key goes on when its client leaves (a
   * retry with the key gets its answer, where stopping it had the retry
   * run, and be billed, again): a stream's session records it, any other
   * request is recorded once its answer is ready (idempotency.ts). A
   * request without one is recorded when its client leaves.
   */
  outlivesClient: boolean;
  /** A stream's session is running: it records the request when it ends, whether or not its client stays. */
  streaming: boolean;
  /** Its answer has reached the onSend hooks: a client leaving from here on has its end line written at once. */
  answering: boolean;
  /**
   * The client left while the request may run on (a stream's session, a keyed request): its end line is written when
   * its answer is ready or its stream ends, with what it bills, rather than when it left, when that was not known yet.
   */
  leftUnlogged: boolean;
  /** The status of an answer written straight to the connection, past Fastify (a 408 for a body not received in time). */
  answeredRaw: number | null;
  /** Bytes of the JSON body as received (0 for none or another kind): what bounds a provider's reported usage (usage-bounds.ts). */
  bodyBytes: number;
  /** Each integer past 2^53 of the JSON body as written, where JSON reads the nearest double (lib/json-numbers.ts); null for none, as nearly always. */
  exactIntegers: readonly ExactInteger[] | null;
  /** Bytes of provider answers held against GW_BODY_MEMORY_MB until the response closes (http/body-memory.ts). */
  answerBytes: number;
}

/** The request a response answers, for what handles its connection's errors outside Fastify (framework-errors.ts). */
export const kGatewayRequest = Symbol('gw.request');

/** A response that names its request (set when the request arrives). */
export type ResponseOfRequest = { [kGatewayRequest]?: { id: string; url: string; gw: RequestState; raw: { complete: boolean } } };

export interface UsageDraft {
  kind: string;
  model: string;
  provider: string | null;
  promptTokens: number;
  completionTokens: number;
  units: number;
  cost: number;
  streamed: boolean;
  /** A resume's (Last-Event-ID): the stream it resumes, named in its end log line; a resume is not billed again. */
  resumes?: string;
}

declare module 'fastify' {
  interface FastifyRequest {
    gw: RequestState;
  }
}

export function newUsageDraft(kind: string, model: string): UsageDraft {
  return { kind, model, provider: null, promptTokens: 0, completionTokens: 0, units: 0, cost: 0, streamed: false };
}
