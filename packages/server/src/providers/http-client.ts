import { createRequire } from 'node:module';
import type { Readable } from 'node:stream';
import { promisify } from 'node:util';
import { brotliDecompress, gunzip, inflate, inflateRaw, type ZlibOptions } from 'node:zlib';
import type { Dispatcher, errors as UndiciErrors, Pool as UndiciPool } from 'undici';
import { GatewayError } from '../errors/gateway-error.js';
import { outOfResources } from '../errors/out-of-resources.js';
import { UpstreamError } from '../errors/upstream-error.js';
import { redactedHead } from '../lib/redact.js';

// The two modules of undici the gateway uses, rather than its index: that loads every dispatcher, fetch, WebSocket,
// the cache and the mocks, 5.4 MB of heap for the life of the process against 1.7 (the pool, its client and errors).
// The version is pinned by the lock file, and scripts/patch-undici.mjs already depends on its layout.
const require = createRequire(import.meta.url);
const Pool = require('undici/lib/dispatcher/pool.js') as typeof UndiciPool;
type Pool = UndiciPool;
const undiciErrors = require('undici/lib/core/errors.js') as typeof UndiciErrors;

export interface JsonResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: unknown;
}

/**
 * What a call's cancellation needs of a signal. An AbortSignal has it, and
 * so does a route's lighter {@link ClientGone}.
 */
export interface CancelSignal {
  readonly aborted: boolean;
  readonly reason?: unknown;
  addEventListener(type: 'abort', listener: AbortListener, options?: { once?: boolean }): void;
  removeEventListener(type: 'abort', listener: AbortListener): void;
}

/** A function, or an object whose `handleEvent` is called (as EventTarget takes it). */
export type AbortListener = (() => void) | { handleEvent(): void };

/** What an upstream call's whole answer is held against as it arrives (http/body-memory.ts): false refuses `bytes` more. */
export interface AnswerMemory {
  hold(bytes: number): boolean;
  /**
   * `bytes` held once other requests let go of enough (`taken`), or `refused` where waiting could not end (its request
   * holds an answer already) or did not in time; the function returned stops the wait.
   */
  holdWhenFree(bytes: number, taken: () => void, refused: () => void): () => void;
  /** Why the answer was not read: the instance's 503. */
  refusal(): GatewayError;
}

export interface UpstreamRequest {
  method: 'GET' | 'POST';
  path: string;
  headers: Record<string, string>;
  /** A stream for uploads (multipart audio), built anew for every attempt. */
  body?: string | Readable;
  signal?: CancelSignal | undefined;
  /** What a whole answer is held against as it arrives (embeddings); past it the call ends unread, with its 503. */
  memory?: AnswerMemory | undefined;
}

const MAX_CONNECTIONS_PER_ORIGIN = 4096;

/**
 * How often an idle pool is let go for a fresh one. undici's pool keeps one client object per connection it ever had
 * open at once, its socket long closed: a burst (a provider slow to answer, 2,000 calls waiting on it) left 1.5 KB of
 * heap per call for the process's life.
 */
const IDLE_POOL_CHECK_MS = 60_000;

/** A provider's read timeout when its config gives none (`timeoutMs`). */
export const DEFAULT_UPSTREAM_TIMEOUT_MS = 30_000;

/** A provider's TCP (and TLS) connect timeout when its config gives none (`connectTimeoutMs`): its read timeout, at most 10 s. */
export function defaultConnectTimeoutMs(readTimeoutMs: number): number {
  return Math.min(readTimeoutMs, 10_000);
}

/**
 * Sent with every upstream request: without `Accept-Encoding` any content coding is acceptable (RFC 9110,
 * 12.5.3), so a provider or a proxy in front of one may compress. One that does all the same has its whole answers
 * decoded ({@link decodedBody}); its event streams are refused, as they are read as they arrive.
 */
export const IDENTITY_ENCODING = { 'accept-encoding': 'identity' } as const;

/**
 * The largest answer read whole (a non-streamed one, or a stream's error
 * answer). Far above any real one (2,048 embeddings of 3,072 floats are
 * about 130 MB of JSON) and below V8's longest string (~512 MiB): past
 * that the text could not be made, and the call was never answered.
 */
export const MAX_WHOLE_BODY_BYTES = 256 * 1024 * 1024;

/**
 * An answer of at least this Content-Length is read into one buffer of its size: gathered in the socket's pieces and
 * joined at its end, it was held twice over while they were joined (44 MB of embeddings: 88 MB at once).
 */
const PRESIZED_BYTES = 1024 * 1024;

/** Why a stream request's 2xx answer was refused unread: it is no event stream. */
class NotAnEventStream extends Error {
  constructor(readonly what: string) {
    super(`answered a stream request with ${what}`);
  }
}

/** `text/event-stream`, with parameters or not, in any case: one test, no string made, on every answer read whole. */
const EVENT_STREAM_TYPE = /^\s*text\/event-stream\s*(?:;|$)/i;

/** Why a 2xx answer to a request that asked for no stream was refused unread: it is an event stream. */
class UnaskedEventStream extends Error {
  constructor() {
    super('answered with an event stream, though no stream was asked for');
  }
}

/** How an answer to a stream request that is no event stream is told: `what` came instead. */
export function notAnEventStream(provider: string, what: string): string {
  return `${provider} answered a stream request with ${what}`;
}

/** The answer's Content-Type named, as {@link notAnEventStream} takes it. */
export function notEventStreamType(media: string): string {
  return `Content-Type ${shortHeader(media)}, not an event stream`;
}

/** Why a call whose answer outgrew {@link MAX_WHOLE_BODY_BYTES} was cut. */
class BodyTooLarge extends Error {
  constructor(readonly limit: number) {
    super(`answer larger than ${limit} bytes`);
  }
}

/**
 * A keep-alive connection pool to one provider origin. Every call has a
 * connect timeout (`connectTimeoutMs`), and a headers timeout and a body
 * (idle) timeout of the provider's `timeoutMs`; past either, undici
 * destroys the connection, so the upstream sees the request go away.
 */
export class UpstreamHttp {
  private pool: Pool;
  private readonly idleCheck: NodeJS.Timeout;

  constructor(
    readonly providerId: string,
    origin: string,
    /** The read timeout (`timeoutMs`); a stream's first chunk is bounded by it too ({@link sseChunkStream}). */
    readonly timeoutMs: number,
    private readonly connectTimeoutMs = defaultConnectTimeoutMs(timeoutMs),
    private readonly maxBodyBytes = MAX_WHOLE_BODY_BYTES,
    idleCheckMs = IDLE_POOL_CHECK_MS,
  ) {
    // HTTP/1.1 carries one request per connection: a low cap would queue
    // streams behind each other (their time to first token would grow with
    // the queue), so the cap only guards file descriptors.
    const open = () => new Pool(origin, { connections: MAX_CONNECTIONS_PER_ORIGIN, keepAliveTimeout: 30_000, connectTimeout: connectTimeoutMs });
    this.pool = open();
    // Only a pool with no call and no connection is replaced: nothing is cut and no keep-alive connection is lost.
    this.idleCheck = setInterval(() => {
      const { connected, pending, queued, running } = this.pool.stats;
      if (connected + pending + queued + running > 0) return;
      void this.pool.close().catch(() => {});
      this.pool = open();
    }, idleCheckMs);
    this.idleCheck.unref();
  }

  /**
   * Dispatches on the pool with a handler that gathers the body itself:
   * `pool.request` builds a Readable body, an async resource and a promise
   * chain per call, a measurable part of a non-streamed request's CPU.
   */
  json(req: UpstreamRequest): Promise<JsonResponse> {
    return new Promise<JsonResponse>((resolve, reject) => {
      const handler = new JsonResponseHandler(resolve, (err) => reject(this.callError(err)), req.signal, this.maxBodyBytes, req.memory);
      this.dispatch(req, handler);
    });
  }

  /**
   * A request whose 200 answer is read through `scan` as it arrives, never held whole (a model list of tens of
   * thousands of entries); any other answer is read whole, as {@link json} reads it.
   */
  scan<T>(req: UpstreamRequest, scan: BodyScan<T>): Promise<ScannedResponse<T>> {
    return new Promise<ScannedResponse<T>>((resolve, reject) => {
      const handler = new ScanResponseHandler(resolve, (err) => reject(this.callError(err)), req.signal, this.maxBodyBytes, scan);
      this.dispatch(req, handler);
    });
  }

  /**
   * Starts a streamed request. Resolves with the open body on 2xx; reads a
   * non-2xx answer whole and returns it for the adapter to map. The body is
   * pushed to its reader as the socket delivers it, with no stream object
   * in between (see {@link UpstreamBody}).
   */
  stream(req: UpstreamRequest): Promise<{ ok: true; status: number; body: UpstreamBody } | ({ ok: false } & JsonResponse)> {
    return new Promise((resolve, reject) => {
      const handler = new StreamResponseHandler(resolve, (err) => reject(this.callError(err)), req.signal, this.maxBodyBytes);
      this.dispatch(req, handler);
    });
  }

  /** Sends `req` with `handler` reading its answer; a dispatch that throws is the handler's error. */
  private dispatch(req: UpstreamRequest, handler: JsonResponseHandler): void {
    if (handler.aborted) return;
    try {
      this.pool.dispatch(
        {
          method: req.method,
          path: req.path,
          headers: req.headers,
          body: req.body ?? null,
          headersTimeout: this.timeoutMs,
          bodyTimeout: this.timeoutMs,
        },
        handler,
      );
    } catch (err) {
      handler.onResponseError(null, err as Error);
    }
  }

  /**
   * A failed call's error: the gateway's own answer passes as it is (a shutdown cut the call), as does this process
   * running out of what a connection takes ({@link outOfResources}: as a connect error it opened the circuits of
   * healthy providers, every provider of a model "down" for 30 s after the descriptors were back); anything else is
   * the provider's.
   */
  private callError(err: unknown): Error {
    return err instanceof GatewayError ? err : (outOfResources(`open a connection to ${this.providerId}`, err) ?? this.toUpstreamError(err));
  }

  toUpstreamError(err: unknown): UpstreamError {
    if (err instanceof UpstreamError) return err;
    const e = err as { code?: string; name?: string; message?: string };
    const base = { provider: this.providerId, cause: err };
    if (e.name === 'AbortError' || e.code === 'UND_ERR_ABORTED') return new UpstreamError({ ...base, kind: 'aborted', message: 'request aborted' });
    if (err instanceof NotAnEventStream) return new UpstreamError({ ...base, kind: 'protocol', message: notAnEventStream(this.providerId, err.what) });
    if (err instanceof UnaskedEventStream) {
      return new UpstreamError({ ...base, kind: 'protocol', message: `${this.providerId} ${err.message}` });
    }
    if (err instanceof UndecodableBody) return new UpstreamError({ ...base, kind: 'protocol', message: `${this.providerId} sent ${err.message}` });
    if (err instanceof BodyTooLarge) {
      return new UpstreamError({ ...base, kind: 'protocol', message: `${this.providerId} sent an answer larger than ${err.limit / 1024 / 1024} MiB` });
    }
    if (e.code === 'UND_ERR_CONNECT_TIMEOUT') {
      return new UpstreamError({ ...base, kind: 'timeout', message: `no connection to ${this.providerId} within ${this.connectTimeoutMs} ms` });
    }
    if (err instanceof undiciErrors.HeadersTimeoutError) {
      return new UpstreamError({
        ...base,
        kind: 'timeout',
        message: `no answer from ${this.providerId} within ${this.timeoutMs} ms`,
        headersWaitMs: this.timeoutMs,
      });
    }
    if (err instanceof undiciErrors.BodyTimeoutError) {
      return new UpstreamError({ ...base, kind: 'timeout', message: `no answer from ${this.providerId} within ${this.timeoutMs} ms` });
    }
    // The provider was reached and hung up (a reset, a close mid-answer): "cannot reach" would send an operator to the network.
    if (e.code === 'UND_ERR_SOCKET' || e.code === 'ECONNRESET' || e.code === 'EPIPE') {
      return new UpstreamError({ ...base, kind: 'connect', message: `${this.providerId} closed the connection before its answer was complete (${e.code})` });
    }
    return new UpstreamError({ ...base, kind: 'connect', message: `cannot reach ${this.providerId}: ${e.code ?? e.message ?? 'connection failed'}` });
  }

  /**
   * Ends the pool's connections at once. Called once the gateway has answered every request: what still runs is a
   * background call (a model list that hangs until its 10 s timeout), which a stop does not wait for.
   */
  async close(): Promise<void> {
    clearInterval(this.idleCheck);
    await this.pool.destroy();
  }
}

/** The longest wait passed on from a provider: a value beyond it (a date years ahead) is a provider's error, not advice. */
export const MAX_RETRY_AFTER_S = 3_600;

/**
 * Reads `retry-after` (seconds or HTTP date) and `retry-after-ms`, as the
 * whole seconds a client should wait: at most {@link MAX_RETRY_AFTER_S};
 * a negative or unreadable value is no advice (undefined), a date already
 * past is 0.
 */
export function retryAfterSeconds(headers: Record<string, string | string[] | undefined>): number | undefined {
  const ms = Number(headers['retry-after-ms']);
  if (Number.isFinite(ms) && ms > 0) return Math.min(MAX_RETRY_AFTER_S, Math.ceil(ms / 1000));
  const raw = headers['retry-after'];
  const value = (Array.isArray(raw) ? raw[0] : raw)?.trim();
  if (!value) return undefined;
  if (/^\d+(\.\d+)?$/.test(value)) return Math.min(MAX_RETRY_AFTER_S, Math.ceil(Number(value)));
  // Only an HTTP date is a date: Date.parse reads "-5" or "12 abc" as years.
  if (!/[a-z]{3}/i.test(value)) return undefined;
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.min(MAX_RETRY_AFTER_S, Math.max(0, Math.ceil((date - Date.now()) / 1000)));
}

/**
 * The most of a provider's error message the gateway reads (and logs). An answer can be megabytes: the message is
 * cut before any pattern runs on it, since a few of those take time that grows with the square of its length
 * (a 120 KB message held the event loop, and every other request, for seconds).
 */
export const MAX_PROVIDER_MESSAGE_CHARS = 4000;

/** A provider's message cut to {@link MAX_PROVIDER_MESSAGE_CHARS}. */
export function boundedMessage(message: string): string {
  return redactedHead(message, MAX_PROVIDER_MESSAGE_CHARS);
}

/** Pulls a human message out of the many error shapes providers use; at most {@link MAX_PROVIDER_MESSAGE_CHARS} long. */
export function upstreamErrorMessage(body: unknown): string {
  if (typeof body === 'string') return redactedHead(body, 500) || 'no body';
  if (body === null || typeof body !== 'object') return 'no body';
  const b = body as { error?: unknown; message?: unknown; detail?: unknown };
  const inner = b.error && typeof b.error === 'object' ? (b.error as { message?: unknown }).message : b.error;
  for (const candidate of [inner, b.message, b.detail]) {
    if (typeof candidate === 'string' && candidate) return boundedMessage(candidate);
    if (candidate && typeof candidate === 'object') return redactedHead(JSON.stringify(candidate), 500);
  }
  return redactedHead(JSON.stringify(body), 500);
}

/**
 * Collects a whole answer for {@link UpstreamHttp.json}: status, headers and
 * the body parsed as JSON (kept as text when it is not JSON). An abort of
 * `signal` ends the request on the wire, whether it waits for headers or
 * for the rest of the body.
 */
class JsonResponseHandler implements Dispatcher.DispatchHandler {
  protected status = 0;
  protected headers: Record<string, string | string[] | undefined> = {};
  private readonly chunks: Buffer[] = [];
  private bytes = 0;
  /** A large answer's buffer, of its Content-Length ({@link PRESIZED_BYTES}), which its pieces are copied into. */
  private whole: Buffer | null = null;
  /** The whole answer is held against {@link memory} already (its Content-Length was). */
  private heldAll = false;
  /** Stops the wait for room to hold the answer in (its socket paused meanwhile); null when not waiting. */
  private stopWaiting: (() => void) | null = null;
  protected controller: Dispatcher.DispatchController | null = null;
  private settled = false;

  constructor(
    private readonly resolve: (res: JsonResponse) => void,
    protected readonly reject: (err: unknown) => void,
    private readonly signal: CancelSignal | undefined,
    private readonly maxBytes: number,
    private readonly memory?: AnswerMemory,
  ) {
    if (!signal) return;
    if (signal.aborted) {
      this.fail(abortReason(signal));
      return;
    }
    // The handler is the listener itself (handleEvent), not a closure made for it: with a closure per call, V8's
    // young-generation collections kept every call's handler, headers and body alive until they were promoted (4.5 KB
    // a request at 50 ms upstream against 0.6 KB, `bench/gc-trace.mjs`), and the major collections paid for them.
    signal.addEventListener('abort', this);
  }

  get aborted(): boolean {
    return this.settled;
  }

  /** The signal fired: the client left. */
  handleEvent(): void {
    const reason = abortReason(this.signal);
    if (this.controller) this.controller.abort(reason);
    else this.fail(reason);
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    if (this.settled) controller.abort(abortReason(this.signal));
    else this.controller = controller;
  }

  onResponseStart(controller: Dispatcher.DispatchController, statusCode: number, headers: Record<string, string | string[] | undefined>): void {
    this.started(statusCode, headers);
    // An event stream is never a whole answer, and its comments (keep-alives) would reset the read timeout for good:
    // a client waiting for a JSON answer would get none. Refused before a byte of it is read, as a protocol fault.
    const type = headers['content-type'];
    if (typeof type === 'string' && statusCode >= 200 && statusCode < 300 && EVENT_STREAM_TYPE.test(type)) {
      this.refuse(controller, new UnaskedEventStream());
      return;
    }
    const length = headers['content-length'];
    if (typeof length === 'string' && (this.memory !== undefined || length.length > 6)) this.sized(controller, Number(length));
  }

  /** An answer of known length: held whole against {@link memory} before a byte of it is read, a large one read into one buffer. */
  private sized(controller: Dispatcher.DispatchController, length: number): void {
    if (!Number.isSafeInteger(length) || length < 0 || length > this.maxBytes) return;
    const memory = this.memory;
    if (memory !== undefined && !memory.hold(length)) {
      // Not read until other answers are sent and let go: the provider's bytes wait in the socket, not in this
      // process, and the answer it was paid for is served late rather than refused.
      controller.pause();
      this.stopWaiting = memory.holdWhenFree(
        length,
        () => {
          this.stopWaiting = null;
          if (this.settled) return;
          this.readSized(length);
          controller.resume();
        },
        () => {
          this.stopWaiting = null;
          this.refuse(controller, memory.refusal());
        },
      );
      return;
    }
    this.readSized(length);
  }

  protected readSized(length: number): void {
    this.heldAll = this.memory !== undefined;
    if (length >= PRESIZED_BYTES) this.whole = Buffer.allocUnsafeSlow(length);
  }

  private refuse(controller: Dispatcher.DispatchController, err: Error): void {
    this.chunks.length = 0;
    this.whole = null;
    this.fail(err);
    controller.abort(err);
  }

  protected started(statusCode: number, headers: Record<string, string | string[] | undefined>): void {
    this.status = statusCode;
    this.headers = headers;
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.settled) return;
    this.bytes += chunk.length;
    if (this.bytes > this.maxBytes) {
      // Held whole, an endless answer would take the instance's memory; cut it as the provider's fault.
      this.refuse(controller, new BodyTooLarge(this.maxBytes));
      return;
    }
    if (this.memory !== undefined && !this.heldAll && !this.memory.hold(chunk.length)) {
      this.refuse(controller, this.memory.refusal());
      return;
    }
    const whole = this.whole;
    if (whole === null) this.chunks.push(chunk);
    else if (this.bytes <= whole.length) chunk.copy(whole, this.bytes - chunk.length);
    else {
      // Longer than its Content-Length said (undici ends such a call itself): gathered in pieces from here on.
      this.chunks.push(whole.subarray(0, this.bytes - chunk.length), chunk);
      this.whole = null;
    }
  }

  onResponseEnd(): void {
    if (this.settled) return;
    let bytes: Buffer;
    try {
      if (this.whole !== null) bytes = this.bytes === this.whole.length ? this.whole : this.whole.subarray(0, this.bytes);
      else bytes = this.chunks.length === 1 ? (this.chunks[0] as Buffer) : Buffer.concat(this.chunks);
    } catch (err) {
      this.fail(err);
      return;
    }
    // Let go as soon as the text is made, not when undici lets go of the handler.
    this.whole = null;
    this.chunks.length = 0;
    const coding = this.headers['content-encoding'];
    if (coding === undefined) {
      this.finish(bytes);
      return;
    }
    // Decoded off the event loop: a few hundred KB of gzip can make 256 MiB, CPU that every other request waited out.
    decodedBody(bytes, headerValue(coding) ?? '', this.status, this.maxBytes).then(
      (decoded) => {
        if (this.settled) return;
        // What was held is the coded bytes: the answer is its decoded ones.
        if (this.memory !== undefined && decoded.length > bytes.length && !this.memory.hold(decoded.length - bytes.length)) this.fail(this.memory.refusal());
        else this.finish(decoded);
      },
      (err: unknown) => this.fail(err),
    );
  }

  protected finish(bytes: Buffer): void {
    let text: string;
    try {
      text = bytes.toString('utf8');
    } catch (err) {
      // Settled only after the text is made: a throw here (a string too long) once left the call unanswered for good.
      this.fail(err);
      return;
    }
    this.settle();
    this.detach();
    let body: unknown = text;
    try {
      body = text.length > 0 ? JSON.parse(text) : null;
    } catch {
      // Keep the raw text: a non-JSON error page still says something.
      body = withoutBom(text);
    }
    this.resolve({ status: this.status, headers: this.headers, body });
  }

  onResponseError(_controller: Dispatcher.DispatchController | null, err: Error): void {
    this.fail(err);
  }

  protected fail(err: unknown): void {
    if (!this.settle()) return;
    this.stopWaiting?.();
    this.detach();
    this.reject(err);
  }

  /** Marks the call answered; false if it already was. The abort signal stays attached until {@link detach}. */
  protected settle(): boolean {
    if (this.settled) return false;
    this.settled = true;
    return true;
  }

  protected detach(): void {
    this.signal?.removeEventListener('abort', this);
  }
}

/** Reads an answer's bytes as they arrive: `write` false once the rest cannot change the outcome, which `end` gives. */
export interface BodyScan<T> {
  write(bytes: Buffer): boolean;
  end(): T;
}

/** A 200 answer as its scan read it, or any other answer read whole. */
export type ScannedResponse<T> = { status: 200; headers: Record<string, string | string[] | undefined>; scanned: T } | (JsonResponse & { scanned?: undefined });

/** How much of a decoded answer is scanned in one turn of the event loop. */
const SCAN_SLICE_BYTES = 256 * 1024;

/**
 * A 200 answer fed to its scan as each network read arrives, so that no more than one read is held and no turn of
 * the event loop scans more; one the provider encoded anyway is decoded whole (bounded as any) and scanned in slices,
 * each on its own turn. Any other status is read whole, as JSON.
 */
class ScanResponseHandler<T> extends JsonResponseHandler {
  private scanning = false;
  /** Bytes scanned since the event loop last turned: libuv reads a busy socket many times over in one turn. */
  private turnBytes = 0;

  constructor(
    private readonly answer: (res: ScannedResponse<T>) => void,
    reject: (err: unknown) => void,
    signal: CancelSignal | undefined,
    maxBytes: number,
    private readonly scan: BodyScan<T>,
  ) {
    super((res) => answer(res), reject, signal, maxBytes);
  }

  protected override started(statusCode: number, headers: Record<string, string | string[] | undefined>): void {
    super.started(statusCode, headers);
    this.scanning = statusCode === 200 && headers['content-encoding'] === undefined;
  }

  /** A scanned answer is never held whole: no buffer of its length (an aggregator's list is tens of MB). */
  protected override readSized(length: number): void {
    if (!this.scanning) super.readSized(length);
  }

  override onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (!this.scanning) {
      super.onResponseData(controller, chunk);
      return;
    }
    if (this.aborted) return;
    if (!this.scan.write(chunk)) {
      // The outcome is known (a broken list, one too long): answered now, the rest not read.
      this.scanned();
      controller.abort(new undiciErrors.RequestAbortedError());
      return;
    }
    this.turnBytes += chunk.length;
    if (this.turnBytes >= SCAN_SLICE_BYTES && !controller.paused) {
      // The socket is read no further until the loop has turned: requests waiting meanwhile are served.
      controller.pause();
      setImmediate(resumeScan, this, controller);
    }
  }

  resumed(controller: Dispatcher.DispatchController): void {
    this.turnBytes = 0;
    controller.resume();
  }

  override onResponseEnd(): void {
    if (!this.scanning) super.onResponseEnd();
    else this.scanned();
  }

  /** A 200 answer decoded whole: scanned a slice per turn of the event loop. */
  protected override finish(bytes: Buffer): void {
    if (this.status !== 200) {
      super.finish(bytes);
      return;
    }
    const next = (from: number) => {
      if (this.aborted) return;
      const to = Math.min(bytes.length, from + SCAN_SLICE_BYTES);
      if (!this.scan.write(bytes.subarray(from, to)) || to === bytes.length) this.scanned();
      else setImmediate(next, to);
    };
    next(0);
  }

  private scanned(): void {
    if (!this.settle()) return;
    this.detach();
    let scanned: T;
    try {
      scanned = this.scan.end();
    } catch (err) {
      this.reject(err);
      return;
    }
    this.answer({ status: 200, headers: this.headers, scanned });
  }
}

function resumeScan(handler: { resumed(controller: Dispatcher.DispatchController): void }, controller: Dispatcher.DispatchController): void {
  handler.resumed(controller);
}

/** Receives an upstream body: its bytes as they arrive, then `end` or `error`, exactly once. */
export interface BodyReader {
  data(bytes: Buffer): void;
  end(): void;
  error(err: Error): void;
}

/** A streamed upstream body, read by push. */
export interface UpstreamBody {
  /** Starts delivery (once): what arrived before comes first, at once. */
  read(reader: BodyReader): void;
  /** Ends the request on the wire; a body that had not ended reports an aborted error. */
  destroy(): void;
}

type StreamAnswer = { ok: true; status: number; body: UpstreamBody } | ({ ok: false } & JsonResponse);

/**
 * A streamed request's answer: on 2xx the request settles with this
 * handler as the body, and each network read goes to the body's reader
 * (held until it attaches); any other status is read whole, as JSON.
 */
class StreamResponseHandler extends JsonResponseHandler implements UpstreamBody {
  private streaming = false;
  private reader: BodyReader | null = null;
  private held: Buffer[] | null = [];
  /** How the body ended before a reader attached. */
  private ending: { error: Error | null } | null = null;
  private done = false;

  constructor(
    private readonly answer: (res: StreamAnswer) => void,
    reject: (err: unknown) => void,
    signal: CancelSignal | undefined,
    maxBytes: number,
  ) {
    super((res) => answer({ ok: false, ...res }), reject, signal, maxBytes);
  }

  override onResponseStart(controller: Dispatcher.DispatchController, statusCode: number, headers: Record<string, string | string[] | undefined>): void {
    this.started(statusCode, headers);
    if (statusCode < 200 || statusCode >= 300) return;
    // The common answer costs these two comparisons; anything else is looked at closer.
    if (headers['content-type'] !== 'text/event-stream' || headers['content-encoding'] !== undefined) {
      const answer = streamAnswer(headers);
      // A JSON answer (an error object a provider sent with a 200, a whole completion) is read whole, its message kept.
      if (answer === 'json') return;
      if (answer !== 'stream') {
        // Refused before a byte of it is read as SSE: what came is named, not reported as a stream cut short.
        const refused = new NotAnEventStream(answer);
        this.fail(refused);
        controller.abort(refused);
        return;
      }
    }
    this.streaming = true;
    if (this.settle()) this.answer({ ok: true, status: statusCode, body: this });
  }

  override onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (!this.streaming) super.onResponseData(controller, chunk);
    else if (this.reader) this.reader.data(chunk);
    else this.held?.push(chunk);
  }

  override onResponseEnd(): void {
    if (!this.streaming) super.onResponseEnd();
    else this.end(null);
  }

  override onResponseError(controller: Dispatcher.DispatchController | null, err: Error): void {
    if (!this.streaming) super.onResponseError(controller, err);
    else this.end(err);
  }

  read(reader: BodyReader): void {
    if (this.reader) throw new Error('an upstream body is read once');
    this.reader = reader;
    const held = this.held ?? [];
    this.held = null;
    for (const chunk of held) reader.data(chunk);
    if (this.ending) this.deliverEnd(this.ending.error);
  }

  destroy(): void {
    if (this.done) return;
    this.controller?.abort(new undiciErrors.RequestAbortedError());
  }

  private end(error: Error | null): void {
    if (this.done) return;
    this.done = true;
    this.detach();
    if (this.reader) this.deliverEnd(error);
    else this.ending = { error };
  }

  private deliverEnd(error: Error | null): void {
    const reader = this.reader as BodyReader;
    if (error) reader.error(error);
    else reader.end();
  }
}

/** Why a whole answer was refused: its content coding is none the gateway can undo, or its bytes are not in it. */
class UndecodableBody extends Error {
  constructor(readonly coding: string) {
    super(`a ${shortHeader(coding)}-encoded answer that could not be decoded`);
  }
}

/**
 * A whole answer's bytes without the content coding a provider or a proxy in front of it applied though the gateway
 * asked for identity (RFC 9110 lets a server do so): gzip, deflate (zlib-wrapped or raw, as servers send both) or br,
 * at most `maxBytes` once decoded. Read undecoded, an error's message would be binary and a success "not JSON". A
 * success that cannot be decoded is the provider's fault; an error status keeps its status, its message saying so.
 */
async function decodedBody(bytes: Buffer, coding: string, status: number, maxBytes: number): Promise<Buffer> {
  const name = coding.trim().toLowerCase();
  if (name === '' || name === 'identity') return bytes;
  try {
    // Output in 256 KiB pieces rather than zlib's 16 KiB: a large answer takes far fewer trips back to the event loop.
    const decoded = await decode(name, bytes, { maxOutputLength: maxBytes, chunkSize: 256 * 1024 });
    if (decoded !== null) return decoded;
  } catch (err) {
    if ((err as { code?: string }).code === 'ERR_BUFFER_TOO_LARGE') throw new BodyTooLarge(maxBytes);
  }
  const refused = new UndecodableBody(coding);
  if (status < 200 || status >= 300) return Buffer.from(refused.message);
  throw refused;
}

const gunzipAsync = promisify<Buffer, ZlibOptions, Buffer>(gunzip);
const brotliAsync = promisify<Buffer, ZlibOptions, Buffer>(brotliDecompress);
const inflateAsync = promisify<Buffer, ZlibOptions, Buffer>(inflate);
const inflateRawAsync = promisify<Buffer, ZlibOptions, Buffer>(inflateRaw);

/** `bytes` decoded from the content coding `name` on zlib's thread pool, or null for a coding the gateway does not know. */
async function decode(name: string, bytes: Buffer, options: ZlibOptions): Promise<Buffer | null> {
  if (name === 'gzip' || name === 'x-gzip') return await gunzipAsync(bytes, options);
  if (name === 'br') return await brotliAsync(bytes, options);
  if (name !== 'deflate') return null;
  try {
    return await inflateAsync(bytes, options);
  } catch (err) {
    if ((err as { code?: string }).code === 'ERR_BUFFER_TOO_LARGE') throw err;
    return await inflateRawAsync(bytes, options);
  }
}

/** Why the call ended: the gateway's own answer when the signal carries one (a shutdown), else undici's abort (the client left). */
function abortReason(signal: CancelSignal | undefined): Error {
  if (signal?.reason instanceof GatewayError) return signal.reason;
  return new undiciErrors.RequestAbortedError(signal?.reason instanceof Error ? signal.reason.message : undefined);
}

/**
 * JSON that a byte order mark put before (some Windows-hosted proxies write one): JSON.parse refuses it, though
 * RFC 8259 lets a parser ignore it and fetch's `json()`, the OpenAI SDK's reader, does. Anything else stays text.
 */
function withoutBom(text: string): unknown {
  if (text.charCodeAt(0) !== 0xfeff) return text;
  try {
    return JSON.parse(text.slice(1));
  } catch {
    return text;
  }
}

/**
 * What a 2xx answer to a stream request is: 'stream' for `text/event-stream` (with parameters too, `charset=utf-8`)
 * or no Content-Type at all (as every answer was read before the type was looked at, so a host that leaves it out
 * keeps working); 'json' for `application/json` (read whole: an error object or a whole completion); otherwise
 * what came instead, for the message: another type, or a content coding the gateway did not ask for.
 */
function streamAnswer(headers: Record<string, string | string[] | undefined>): string {
  const coding = headerValue(headers['content-encoding']);
  if (coding !== undefined && coding.trim() !== '' && coding.trim().toLowerCase() !== 'identity') {
    return `a ${shortHeader(coding)}-encoded body, which the gateway did not ask for (it asks for identity)`;
  }
  const type = headerValue(headers['content-type']);
  if (type === undefined || type.trim() === '') return 'stream';
  const media = type.split(';', 1)[0]?.trim().toLowerCase() ?? '';
  if (media === 'text/event-stream') return 'stream';
  if (media === 'application/json') return 'json';
  return notEventStreamType(media);
}

/** A header's value, the first when it came more than once. */
function headerValue(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

/** A header value as a message names it: bounded, so that a long one does not fill the message. */
function shortHeader(value: string): string {
  const v = value.trim();
  return v.length > 60 ? `${v.slice(0, 60)}…` : v;
}
