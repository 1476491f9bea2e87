import { createHash, type Hash, randomUUID } from 'node:crypto';
import { H } from '@gw/schema';
import { GatewayError } from '../errors/gateway-error.js';
import type { ExactInteger } from '../lib/json-numbers.js';
import { headerCount } from '../lib/raw-headers.js';
import { type IdempotencyBackend, NotSentError, type StoredAnswer } from './idempotency-types.js';

export type { IdempotencyBackend, StoredAnswer } from './idempotency-types.js';

/** A stored answer is replayed for this long. */
export const IDEMPOTENCY_RETENTION_MS = 24 * 60 * 60 * 1000;
/** How often a waiting repeat looks for the first request's answer. */
const POLL_MS = 50;
/** What a repeat that waited in vain is told to wait before trying again. */
const CONFLICT_RETRY_AFTER_S = 1;
/** How often a release that failed is sent again. */
const RELEASE_RETRY_MS = 1000;

export interface IdempotencySettings {
  /** How long a concurrent repeat waits for the first request's answer before its 409. */
  waitMs: number;
  /** How long a claim lives without being refreshed (its owner refreshes it every third of this while it runs). */
  claimTtlMs: number;
}

/** `waited`: the key was claimed after looks that found another request's claim (it failed, or its instance died). */
export type Begun = { kind: 'run'; claim: Claim; waited: boolean } | { kind: 'replay'; answer: StoredAnswer };

/**
 * 1 to 255 printable ASCII characters (IETF Idempotency-Key draft; Stripe allows 255), in one header: Node joins
 * repeated ones into `a, b`, a key no retry that sends one of them (or a proxy that keeps one) would match, so the
 * retry would run and be billed again. `Idempotency-Key` counts as the same header: with both, which one is meant?
 */
export function checkIdempotencyKey(raw: string | string[], rawHeaders: string[]): string {
  if (headerCount(rawHeaders, H.idempotencyKey) + headerCount(rawHeaders, H.idempotencyKeyStandard) > 1)
    throw new GatewayError('validation', 'Send exactly one X-Idempotency-Key (or Idempotency-Key) header.', { param: 'X-Idempotency-Key' });
  if (typeof raw !== 'string' || !/^[\x20-\x7e]{1,255}$/.test(raw)) {
    throw new GatewayError('validation', 'Invalid X-Idempotency-Key: expected 1 to 255 printable ASCII characters.', { param: 'X-Idempotency-Key' });
  }
  return raw;
}

/** Keys are per API key; the key itself is digested so its length and characters never reach a storage key. */
export function idempotencyScope(apiKeyId: string, key: string): string {
  return `${apiKeyId}:${createHash('sha256').update(key).digest('hex')}`;
}

/**
 * The request a key was first used with: method, path and body, with object keys sorted so field order does not matter.
 * The canonical JSON goes to the hash piece by piece rather than as one string: for a 4 MB body that string was a second
 * copy of the body, built by concatenation and then flattened, on the event loop (docs/decisions.md). The digest is the
 * same as the one string's, so a key claimed before still matches its retry.
 */
export function fingerprint(method: string, url: string, body: unknown, extra = '', exact: readonly ExactInteger[] | null = null): string {
  const out = new CanonicalHash(createHash('sha256'), exact === null ? null : writtenBy(exact));
  out.write(`${method} ${url}\n`);
  out.value(body);
  out.write(`\n${extra}`);
  return out.digest();
}

/**
 * The text of each integer past 2^53 by the object (or array) and key it is the value of. The body holds the nearest
 * double, which two integers share (9007199254740993 and …992): the fingerprint takes the text the provider receives.
 */
function writtenBy(exact: readonly ExactInteger[]): Map<object, Map<string, string>> {
  const by = new Map<object, Map<string, string>>();
  for (const { holder, key, source } of exact) {
    const keys = by.get(holder);
    if (keys === undefined) by.set(holder, new Map([[key, source]]));
    else keys.set(key, source);
  }
  return by;
}

/** Whether every item is a number (a list of objects or strings is told by its first). */
function onlyNumbers(list: unknown[]): boolean {
  for (let i = 0; i < list.length; i++) if (typeof list[i] !== 'number') return false;
  return list.length > 0;
}

/** Small pieces are gathered before each update (a call into the hash per comma would cost more than the copy it saves). */
const GATHER_CHARS = 16 * 1024;
/** A string that JSON.stringify writes as it is, between quotes: no quote, backslash, control character or surrogate. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: the control characters are what JSON escapes.
const NEEDS_ESCAPE = /["\\\u0000-\u001f\ud800-\udfff]/;

class CanonicalHash {
  private pending = '';

  constructor(
    private readonly hash: Hash,
    /** Integers past 2^53 as written, by holder and key; null for none, as nearly always. */
    private readonly written: Map<object, Map<string, string>> | null,
  ) {}

  write(piece: string): void {
    if (piece.length >= GATHER_CHARS) {
      // As it is: gathered, it would be copied once more to flatten the concatenation.
      this.flush();
      this.hash.update(piece);
      return;
    }
    this.pending += piece;
    if (this.pending.length >= GATHER_CHARS) this.flush();
  }

  value(value: unknown): void {
    if (typeof value === 'string') this.string(value);
    else if (Array.isArray(value)) {
      const sources = this.written?.get(value);
      // Token ids (LangChain's embeddings send them), a vector: written whole, as the walk below would, 5 times faster.
      if (sources === undefined && onlyNumbers(value)) {
        this.write(JSON.stringify(value));
        return;
      }
      this.write('[');
      for (let i = 0; i < value.length; i++) {
        if (i > 0) this.write(',');
        const source = sources?.get(String(i));
        if (source === undefined || typeof value[i] !== 'number') this.value(value[i]);
        else this.write(source);
      }
      this.write(']');
    } else if (value !== null && typeof value === 'object') {
      const record = value as Record<string, unknown>;
      // Default sort: UTF-16 code units, as the `<` it replaces.
      const keys = Object.keys(record).sort();
      const sources = this.written?.get(record);
      this.write('{');
      let first = true;
      for (const k of keys) {
        const v = record[k];
        if (v === undefined) continue;
        this.write(first ? JSON.stringify(k) : `,${JSON.stringify(k)}`);
        this.write(':');
        const source = sources?.get(k);
        if (source === undefined || typeof v !== 'number') this.value(v);
        else this.write(source);
        first = false;
      }
      this.write('}');
    } else this.write(JSON.stringify(value) ?? 'null');
  }

  /** A long string (a data URL, a document) goes to the hash as it is, without the quoted copy JSON.stringify makes. */
  private string(s: string): void {
    if (s.length < GATHER_CHARS || NEEDS_ESCAPE.test(s)) {
      this.write(JSON.stringify(s));
      return;
    }
    this.write('"');
    this.write(s);
    this.write('"');
  }

  private flush(): void {
    if (this.pending === '') return;
    this.hash.update(this.pending);
    this.pending = '';
  }

  digest(): string {
    this.flush();
    return this.hash.digest('hex');
  }
}

/**
 * X-Idempotency-Key: the first request claims the key and runs; a repeat
 * with the same fingerprint replays its stored answer, or waits a bounded
 * time for it (409 after); a different fingerprint is a 422.
 */
export class IdempotencyService {
  constructor(
    /** Where claims live (public for operations and tests: a raw claim with no heartbeat is what a crashed instance leaves). */
    readonly backend: IdempotencyBackend,
    readonly settings: IdempotencySettings,
    /** This instance, named with the request id in its claims where instances share PostgreSQL only (store/presence.ts). */
    private readonly instance = '',
  ) {}

  /**
   * Claims the key, or finds its answer. `replayable` may say a stored
   * answer cannot be replayed here yet (a stream running on another
   * instance without a shared buffer): the repeat then waits as for a
   * pending claim; or that it is a stream abandoned before its end: the
   * answer is dropped and the key claimed afresh.
   */
  async begin(
    scope: string,
    fp: string,
    replayable: (answer: StoredAnswer) => Promise<boolean | 'abandoned'> = async () => true,
    requestId = '',
  ): Promise<Begun> {
    // Where a claim's instance can die unseen by Redis, the claim says whose request it is: a repeat tells by it
    // whether that request was billed (idempotency-sql.ts).
    const owner = this.instance && requestId ? `${requestId}@${this.instance}` : randomUUID();
    const deadline = Date.now() + this.settings.waitMs;
    for (let waited = false; ; waited = true) {
      // Claiming again on every look: if the first request's claim is released or runs out, one waiter takes over.
      let entry: Awaited<ReturnType<IdempotencyBackend['claim']>>;
      try {
        entry = await this.backend.claim(scope, fp, owner, this.settings.claimTtlMs);
      } catch (err) {
        // A claim that timed out may still land (a slow Redis or database runs it later): this request answers 503
        // and runs nothing, so its claim must not hold the client's retry at 409 until it runs out.
        if (!(err instanceof NotSentError)) releaseUntilDone(this.backend, scope, owner, this.settings.claimTtlMs).catch(() => {});
        throw unavailable(err);
      }
      if (entry === null) return { kind: 'run', claim: new Claim(this.backend, scope, owner, this.settings.claimTtlMs), waited };
      if (entry.fingerprint !== fp) {
        throw new GatewayError('unprocessable', 'This X-Idempotency-Key was already used with a different request; use a new key for a new request.', {
          param: 'X-Idempotency-Key',
        });
      }
      if (entry.state === 'lost') {
        throw new GatewayError(
          'unprocessable',
          'The request first sent with this X-Idempotency-Key was billed, but the gateway instance running it stopped before its answer was kept; send it again with a new key.',
          { param: 'X-Idempotency-Key' },
        );
      }
      if (entry.state === 'done') {
        const can = await replayable(entry.answer);
        if (can === true) return { kind: 'replay', answer: entry.answer };
        // A stream an earlier life of this process left unfinished was never billed, and nobody will finish it: the
        // answer is dropped, and the next look (after the pause below) claims the key.
        const streamId = entry.answer.stream?.id;
        const forget = this.backend.forgetStream?.bind(this.backend);
        if (can === 'abandoned' && streamId !== undefined && forget) await this.unavailableOnError(() => forget(scope, streamId));
      }
      if (Date.now() >= deadline) {
        throw new GatewayError('conflict', 'A request with this X-Idempotency-Key is still in progress; retry after it has finished.', {
          param: 'X-Idempotency-Key',
          retryAfterS: CONFLICT_RETRY_AFTER_S,
        });
      }
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
  }

  private async unavailableOnError<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      throw unavailable(err);
    }
  }

  close(): Promise<void> {
    return this.backend.close();
  }
}

/** Running without the guarantee the client asked for could double a charge: refused instead. */
function unavailable(cause: unknown): GatewayError {
  return new GatewayError('idempotency_unavailable', 'Idempotency keys cannot be checked right now; retry shortly.', { retryAfterS: 1, cause });
}

/**
 * Releases `owner`'s claim; one that fails (Redis or the database slow or away) is sent again every second for twice
 * the claim's life, as the claim itself may land late. The first attempt's outcome is returned.
 */
function releaseUntilDone(backend: IdempotencyBackend, scope: string, owner: string, ttlMs: number): Promise<void> {
  const until = Date.now() + 2 * ttlMs;
  const again = (): void => {
    if (Date.now() + RELEASE_RETRY_MS > until) return;
    setTimeout(() => backend.release(scope, owner).catch(again), RELEASE_RETRY_MS).unref();
  };
  const first = backend.release(scope, owner);
  first.catch(again);
  return first;
}

/** A running request's hold on its key: refreshed while it runs, then completed with the answer or released. */
export class Claim {
  private heartbeat: NodeJS.Timeout | null;

  constructor(
    private readonly backend: IdempotencyBackend,
    readonly scope: string,
    private readonly owner: string,
    private readonly ttlMs: number,
  ) {
    this.heartbeat = setInterval(
      () => {
        backend.refresh(scope, owner, ttlMs).catch(() => {
          // A missed refresh shortens the claim; the next one extends it again.
        });
      },
      Math.max(10, Math.floor(ttlMs / 3)),
    );
    this.heartbeat.unref();
  }

  /** Stores the answer for IDEMPOTENCY_RETENTION_MS (a stream's answer may be completed again once it has every event). */
  async complete(answer: StoredAnswer): Promise<void> {
    this.stop();
    await this.backend.complete(this.scope, this.owner, answer, IDEMPOTENCY_RETENTION_MS);
  }

  /** Gives the key up without an answer: a retry runs afresh. */
  async release(): Promise<void> {
    this.stop();
    await releaseUntilDone(this.backend, this.scope, this.owner, this.ttlMs);
  }

  /** Gives the key up, with the answer stored for it (a stream the gateway itself ended): a retry runs afresh. */
  async drop(): Promise<void> {
    this.stop();
    await this.backend.drop(this.scope, this.owner);
  }

  private stop(): void {
    if (this.heartbeat) clearInterval(this.heartbeat);
    this.heartbeat = null;
  }
}
