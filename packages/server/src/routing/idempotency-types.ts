import type { StreamEvent } from '../streaming/types.js';

/** What a repeat of an idempotent request is answered with. */
export interface StoredAnswer {
  status: number;
  /** Content type and routing headers of the first answer. */
  headers: Record<string, string>;
  /** A JSON (or text) answer's body. */
  body?: string;
  /**
   * A streamed answer: its stream id, when it began (ms since the epoch, the relaying instance's clock; answers
   * stored before it was kept lack it), the instance relaying it where instances share PostgreSQL without Redis
   * (store/presence.ts) and, once it ended, every event of it; or, past the key's GW_IDEMPOTENCY_KEPT_MB, the bytes of
   * its events, which are not kept (routing/kept-answers.ts). `ageMs` is never stored: read with the answer, how long
   * ago Redis stored it, by Redis's clock (an answer an older gateway stored lacks it).
   */
  stream?: { id: string; at?: number; instance?: string; events?: StreamEvent[]; notKept?: number; ageMs?: number };
}

/** A backend call refused before anything was sent (its connection down, its breaker open): nothing of it can land later. */
export class NotSentError extends Error {}

/** lost: a request billed whose instance died before it stored its answer (instances sharing PostgreSQL only). */
export type IdempotencyEntry =
  | { state: 'pending'; fingerprint: string }
  | { state: 'done'; fingerprint: string; answer: StoredAnswer }
  | { state: 'lost'; fingerprint: string };

/**
 * Where claims and answers live: Redis when configured (idempotency-redis.ts),
 * the store otherwise (idempotency-sql.ts). Every operation on a claim is
 * checked against its owner token, so a claim that expired and was taken
 * over cannot be completed or released by its old owner.
 */
export interface IdempotencyBackend {
  /** Claims `scope` for `owner` for `ttlMs` unless a live entry exists: null when claimed, else that entry. */
  claim(scope: string, fingerprint: string, owner: string, ttlMs: number): Promise<IdempotencyEntry | null>;
  refresh(scope: string, owner: string, ttlMs: number): Promise<void>;
  complete(scope: string, owner: string, answer: StoredAnswer, ttlMs: number): Promise<void>;
  release(scope: string, owner: string): Promise<void>;
  /** Drops `owner`'s entry, its stored answer included (a stream the gateway itself ended): a retry runs afresh. */
  drop(scope: string, owner: string): Promise<void>;
  /**
   * Drops a stored answer that is the stream `streamId` without its events (one a crashed process left
   * unfinished), so that a retry runs afresh; an answer stored since (another stream) is kept. Only the
   * store's backend has it: only the embedded setup can tell such a stream (http/idempotent-replay.ts).
   */
  forgetStream?(scope: string, streamId: string): Promise<void>;
  close(): Promise<void>;
}
