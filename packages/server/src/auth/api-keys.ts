import type { IncomingHttpHeaders } from 'node:http';
import { KEY_PREFIX } from '@gw/schema';
import { GatewayError } from '../errors/gateway-error.js';
import type { Bus } from '../kv/types.js';
import { steadyMs } from '../lib/clock.js';
import { randomToken, sha256Hex } from '../lib/crypto.js';
import type { ApiKeyRecord, Store } from '../store/types.js';
import { Confirmations } from './confirmations.js';

const KEY_PATTERN = /^gw_live_[A-Za-z0-9_-]{43}$/;
const CHANNEL = 'gw:keys';
/** Where each instance confirms, by the event's nonce, that it applied an event of {@link CHANNEL}. */
const ACK_CHANNEL = 'gw:keys:ack';
/** How long an admin change waits for every instance to confirm it (past it, the call answers anyway). */
export const CONFIRM_TIMEOUT_MS = 1_000;
/** How long an admin change waits for Redis to answer its publish (a slow Redis: not the request path's 500 ms). */
export const PUBLISH_WAIT_MS = 5_000;
const MAX_CACHED = 100_000;
/** How long a key the store does not know is answered 401 without asking it again, and how many such keys are kept. */
const UNKNOWN_TTL_MS = 10_000;
const MAX_UNKNOWN = 50_000;
/** Key events kept for the bus's return when their publish failed (they are rare: admin calls). */
const MAX_UNSENT = 10_000;
/**
 * How long a known key or workspace is trusted while this instance cannot hear changes (its subscription to Redis
 * lost, or Redis away): re-read at its first use after the loss, then once its copy is older than this, so that a
 * change made meanwhile applies within it rather than within the cache's TTL.
 */
export const DEAF_TRUST_MS = 250;

/**
 * Whether a copy read from the store at `readAt` is still to be trusted, `ttlMs` being the cache's own. Times are
 * {@link steadyMs}: on the wall clock, a step back of two minutes kept a key revoked elsewhere trusted two more.
 */
export function stillTrusted(readAt: number, ttlMs: number, deafSince: number | null, now = steadyMs()): boolean {
  if (deafSince === null) return now - readAt < ttlMs;
  return readAt > deafSince && now - readAt < Math.min(ttlMs, DEAF_TRUST_MS);
}

export function generateApiKey(): { key: string; hash: string } {
  const key = `${KEY_PREFIX}${randomToken(32)}`;
  return { key, hash: sha256Hex(key) };
}

interface Cached {
  record: ApiKeyRecord;
  fetchedAt: number;
  refreshing: boolean;
}

/**
 * `workspace`: a workspace changed (its id), for {@link ApiKeyAuthenticator.onWorkspaceChanged}. `nonce`: the
 * publisher waits for its confirmation by every instance (an event sent again after an outage has none).
 */
type KeyEvent = { op: 'revoke' | 'changed' | 'workspace'; id: string; nonce?: string };

/**
 * What {@link ApiKeyAuthenticator.announce} knows of the other instances: how many heard it, how many did not confirm
 * in time; `publish`: whether Redis answered the publish, refused it or lost its connection (`failed`: sent again once
 * it is back), or had not answered within {@link PUBLISH_WAIT_MS} (`late`: it goes on, nobody is waited for).
 */
export interface Announced {
  receivers: number;
  unconfirmed: number;
  publish: 'answered' | 'failed' | 'late';
}

/**
 * Authenticates API keys. Lookup is by the key's sha256, so the time it
 * takes does not depend on how close a guess is to a real key. Known keys
 * are cached: they keep working while the store is unreachable, revocations
 * arrive over the bus at once, and entries refresh in the background.
 */
export class ApiKeyAuthenticator {
  private readonly byHash = new Map<string, Cached>();
  private readonly hashById = new Map<string, string>();
  private readonly lookups = new Map<string, Promise<ApiKeyRecord | null>>();
  /**
   * Per key id, the number of the last revocation or change applied while a
   * store read was in flight (cleared when none is): a read that began
   * before the event may return the record as it was, which must not be
   * cached over the event (a revoked key would work again until the TTL).
   */
  private readonly eventSeq = new Map<string, number>();
  private seq = 0;
  private readsInFlight = 0;
  /**
   * Keys the store did not know, by hash, until when: a client (or an attacker) repeating a wrong key costs no
   * database read each time. A new key cannot be among them: its 256-bit secret was never presented before.
   */
  private readonly unknown = new Map<string, number>();
  /** Events whose publish failed (the bus was away), sent again when it is back. */
  private unsent: KeyEvent[] = [];
  /** Admin changes waiting for every instance to confirm it applied them. */
  readonly confirmations = new Confirmations(CONFIRM_TIMEOUT_MS);

  constructor(
    private readonly store: Store,
    private readonly bus: Bus,
    private readonly ttlMs: number,
    private readonly lookupTimeoutMs = 2_000,
    private readonly maxCached = MAX_CACHED,
  ) {}

  /** Called on every instance when a workspace changed (the admin API's PATCH), so that its cached copy is dropped. */
  onWorkspaceChanged: (id: string) => void = () => {};

  async start(): Promise<void> {
    this.bus.onResubscribe(() => this.markAllStale());
    this.bus.onPublishReady(() => void this.publishUnsent());
    await this.bus.subscribe(ACK_CHANNEL, (nonce) => this.confirmations.heard(nonce));
    await this.bus.subscribe(CHANNEL, (msg) => this.onEvent(msg));
  }

  /**
   * The key's record: at once (no promise) when the key is cached, the
   * usual case; a promise when the store must be read. A bad or revoked
   * key throws (or rejects) with 401.
   */
  authenticate(authorization: string | undefined): ApiKeyRecord | Promise<ApiKeyRecord> {
    const key = parseBearer(authorization);
    const hash = sha256Hex(key);
    const cached = this.byHash.get(hash);
    if (cached) {
      if (!stillTrusted(cached.fetchedAt, this.ttlMs, this.bus.deafSince())) this.refreshInBackground(hash, cached);
      return checkUsable(cached.record);
    }
    const unknownUntil = this.unknown.get(hash);
    if (unknownUntil !== undefined) {
      if (unknownUntil > steadyMs()) throw new GatewayError('unauthorized', 'Invalid API key.');
      this.unknown.delete(hash);
    }
    return this.authenticateFromStore(hash);
  }

  private async authenticateFromStore(hash: string): Promise<ApiKeyRecord> {
    let record: ApiKeyRecord | null;
    try {
      record = await this.lookup(hash);
    } catch (err) {
      throw new GatewayError('store_unavailable', 'The key store is unreachable; please retry shortly.', { retryAfterS: 1, cause: err });
    }
    if (!record) {
      this.rememberUnknown(hash);
      throw new GatewayError('unauthorized', 'Invalid API key.');
    }
    this.remember(record);
    return checkUsable(record);
  }

  /**
   * One store read per key at a time: the requests that miss the cache
   * together (a burst right after a start) share it, instead of each
   * sending the database the same query.
   */
  private lookup(hash: string): Promise<ApiKeyRecord | null> {
    let pending = this.lookups.get(hash);
    if (!pending) {
      pending = withTimeout(this.readFresh(hash), this.lookupTimeoutMs).finally(() => this.lookups.delete(hash));
      this.lookups.set(hash, pending);
    }
    return pending;
  }

  /**
   * The key's record from the store, read again when a revocation or change
   * of it was applied while the read was in flight: the write precedes its
   * event, so a read that begins after the event sees it.
   */
  private async readFresh(hash: string): Promise<ApiKeyRecord | null> {
    for (let attempt = 0; ; attempt++) {
      const since = this.seq;
      this.readsInFlight++;
      try {
        const record = await this.store.keys.getByHash(hash);
        const overtaken = record !== null && (this.eventSeq.get(record.id) ?? 0) > since;
        if (!overtaken || attempt >= 3) return record;
      } finally {
        if (--this.readsInFlight === 0) this.eventSeq.clear();
      }
    }
  }

  /**
   * Drops a key from this instance's cache, tells every other instance, and waits until each that heard it has
   * applied it (at most {@link CONFIRM_TIMEOUT_MS} after Redis took it): the publish answers once Redis has taken it,
   * and a client's next request could reach another instance before its subscriber connection was read. A slow Redis
   * is waited for up to {@link PUBLISH_WAIT_MS}, not the request path's command timeout; past it, the publish goes on.
   */
  async announce(op: KeyEvent['op'], id: string): Promise<Announced> {
    this.apply({ op, id });
    const nonce = randomToken(12);
    this.confirmations.expect(nonce);
    const published = this.bus.publishAwaited(CHANNEL, JSON.stringify({ op, id, nonce } satisfies KeyEvent)).catch(() => {
      // Sent again when the bus is back: until then other instances go on with the key as they know it,
      // and waiting for their cache TTL let a revoked key work on them well after Redis was back.
      this.keepUnsent({ op, id });
      return 'failed' as const;
    });
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<'late'>((resolve) => {
      timer = setTimeout(() => resolve('late'), PUBLISH_WAIT_MS);
    });
    const receivers = await Promise.race([published, late]).finally(() => clearTimeout(timer));
    if (typeof receivers !== 'number') {
      this.confirmations.forget(nonce);
      return { receivers: 0, unconfirmed: 0, publish: receivers };
    }
    return { receivers, unconfirmed: await this.confirmations.wait(nonce, receivers), publish: 'answered' };
  }

  private keepUnsent(event: KeyEvent): void {
    if (this.unsent.length >= MAX_UNSENT) this.unsent.shift();
    this.unsent.push(event);
  }

  private async publishUnsent(): Promise<void> {
    const events = this.unsent;
    this.unsent = [];
    for (const [i, event] of events.entries()) {
      try {
        await this.bus.publishAwaited(CHANNEL, JSON.stringify(event));
      } catch {
        for (const left of events.slice(i)) this.keepUnsent(left);
        return;
      }
    }
  }

  /**
   * After the bus lost its connection, the revocations and changes published meanwhile never arrived:
   * every cached key is re-read at its next use (served as known until the read answers, as at its TTL).
   */
  private markAllStale(): void {
    for (const cached of this.byHash.values()) cached.fetchedAt = 0;
  }

  private onEvent(message: string): void {
    let event: KeyEvent;
    try {
      event = JSON.parse(message) as KeyEvent;
      if (typeof event.id !== 'string') return;
      this.apply(event);
    } catch {
      // Ignore foreign messages.
      return;
    }
    // Applied: the instance that made the change may answer its admin call. A lost confirmation only makes it wait.
    // Not failed at the command timeout: with Redis 800 ms late, three in a row dropped the publishing connection,
    // and the next admin change found it reconnecting (published nowhere, unconfirmed).
    if (typeof event.nonce === 'string') this.bus.publishAwaited(ACK_CHANNEL, event.nonce).catch(() => {});
  }

  private apply(event: KeyEvent): void {
    if (event.op === 'workspace') {
      this.onWorkspaceChanged(event.id);
      return;
    }
    if (this.readsInFlight > 0) this.eventSeq.set(event.id, ++this.seq);
    const hash = this.hashById.get(event.id);
    if (!hash) return;
    const cached = this.byHash.get(hash);
    if (event.op === 'revoke' && cached) {
      cached.record = { ...cached.record, revoked: true };
    } else {
      this.byHash.delete(hash);
      this.hashById.delete(event.id);
    }
  }

  private rememberUnknown(hash: string): void {
    // Oldest first out: a flood of distinct random keys cannot grow the map past its bound.
    if (this.unknown.size >= MAX_UNKNOWN) this.unknown.delete(this.unknown.keys().next().value as string);
    this.unknown.set(hash, steadyMs() + UNKNOWN_TTL_MS);
  }

  /**
   * A key read again goes to the back of the cache (the key longest without a read leaves first), and one that
   * leaves takes its id with it: left behind, the ids of every key this instance had ever served stayed in memory.
   */
  private remember(record: ApiKeyRecord): void {
    if (!this.byHash.delete(record.hash) && this.byHash.size >= this.maxCached) {
      const oldest = this.byHash.values().next().value;
      if (oldest !== undefined) this.forget(oldest.record);
    }
    this.byHash.set(record.hash, { record, fetchedAt: steadyMs(), refreshing: false });
    this.hashById.set(record.id, record.hash);
  }

  private forget(record: ApiKeyRecord): void {
    this.byHash.delete(record.hash);
    if (this.hashById.get(record.id) === record.hash) this.hashById.delete(record.id);
  }

  /** How many keys are cached and how many ids are mapped to them (for tests). */
  cacheSize(): { keys: number; ids: number } {
    return { keys: this.byHash.size, ids: this.hashById.size };
  }

  private refreshInBackground(hash: string, cached: Cached): void {
    if (cached.refreshing) return;
    cached.refreshing = true;
    this.readFresh(hash).then(
      (record) => {
        if (record) this.remember(record);
        else this.forget(cached.record);
      },
      () => {
        // Store unreachable: keep serving the known key.
        cached.refreshing = false;
      },
    );
  }
}

/**
 * A store that accepts connections but never answers must not hold a request for long. Node runs due timers before
 * it reads sockets (and a worker's messages): after the loop was held past the bound (a burst on a saturated core),
 * the answer may be waiting unread. So the bound, once due, waits two turns of the loop: the first reads what came
 * before it fired, the second what came during the turn after (a burst read in one go). Only a store that had not
 * answered by then fails the request.
 */
function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    const fail = () => reject(new Error(`store lookup took over ${ms} ms`));
    timer = setTimeout(() => setImmediate(() => setImmediate(fail)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

function parseBearer(authorization: string | undefined): string {
  if (!authorization) throw new GatewayError('unauthorized', 'Missing API key: send the header Authorization: Bearer gw_live_…');
  const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
  const key = match?.[1];
  if (!key || !KEY_PATTERN.test(key)) {
    // Another scheme (Basic, as some HTTP clients build from a user and password) is named, rather than called a malformed key.
    const scheme = match ? null : /^([A-Za-z][A-Za-z0-9_-]{0,19})\s/.exec(authorization)?.[1];
    const what = scheme && scheme.toLowerCase() !== 'bearer' ? `The Authorization scheme '${scheme}' is not taken` : 'Malformed API key';
    throw new GatewayError('unauthorized', `${what}: expected Authorization: Bearer gw_live_…`);
  }
  return key;
}

/**
 * The 401 for a request without Authorization that carries a key elsewhere: in `x-api-key` (Anthropic's clients) or
 * `api-key` (Azure OpenAI's), or in the URL. Only Authorization is read; said so, rather than 'Missing API key' to a
 * client that sent one. Null when there is no such key. Never says the key.
 */
export function keyElsewhereError(headers: IncomingHttpHeaders, url: string): GatewayError | null {
  const header = headers['x-api-key'] !== undefined ? 'x-api-key' : headers['api-key'] !== undefined ? 'api-key' : null;
  if (header) {
    return new GatewayError('unauthorized', `Missing API key: the '${header}' header is not read here; send the key as Authorization: Bearer gw_live_…`);
  }
  const at = url.indexOf('?');
  if (at !== -1 && url.includes(KEY_PREFIX, at)) {
    return new GatewayError(
      'unauthorized',
      'Missing API key: a key in the URL is not read here (URLs end up in logs along the way: treat that key as exposed); send it as Authorization: Bearer gw_live_…',
    );
  }
  return null;
}

function checkUsable(record: ApiKeyRecord): ApiKeyRecord {
  if (record.revoked) throw new GatewayError('unauthorized', 'This API key has been revoked.');
  return record;
}
