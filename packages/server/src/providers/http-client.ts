import type { Readable } from 'node:stream';
import { type Dispatcher, Pool, errors as undiciErrors } from 'undici';
import { UpstreamError } from '../errors/upstream-error.js';

export interface JsonResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: unknown;
}

export interface UpstreamRequest {
  method: 'GET' | 'POST';
  path: string;
  headers: Record<string, string>;
  /** A stream for uploads (multipart audio), built anew for every attempt. */
  body?: string | Readable;
  signal?: AbortSignal;
}

const MAX_CONNECTIONS_PER_ORIGIN = 4096;

/**
 * A keep-alive connection pool to one provider origin. Every call has a
 * connect timeout (`connectTimeoutMs`), and a headers timeout and a body
 * (idle) timeout of the provider's `timeoutMs`; past either, undici
 * destroys the connection, so the upstream sees the request go away.
 */
export class UpstreamHttp {
  private readonly pool: Pool;

  constructor(
    readonly providerId: string,
    origin: string,
    private readonly timeoutMs: number,
    /** TCP (and TLS) connect; default: the read timeout, at most 10 s. */
    private readonly connectTimeoutMs = Math.min(timeoutMs, 10_000),
  ) {
    // HTTP/1.1 carries one request per connection: a low cap would queue
    // streams behind each other (their time to first token would grow with
    // the queue), so the cap only guards file descriptors.
    this.pool = new Pool(origin, { connections: MAX_CONNECTIONS_PER_ORIGIN, keepAliveTimeout: 30_000, connectTimeout: connectTimeoutMs });
  }

  /**
   * Dispatches on the pool with a handler that gathers the body itself:
   * `pool.request` builds a Readable body, an async resource and a promise
   * chain per call, a measurable part of a non-streamed request's CPU.
   */
  json(req: UpstreamRequest): Promise<JsonResponse> {
    return new Promise<JsonResponse>((resolve, reject) => {
      const handler = new JsonResponseHandler(resolve, (err) => reject(this.toUpstreamError(err)), req.signal);
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
    });
  }

  /**
   * Starts a streamed request. Resolves with the open body on 2xx; reads a
   * non-2xx answer whole and returns it for the adapter to map.
   */
  async stream(req: UpstreamRequest): Promise<{ ok: true; status: number; body: Readable } | ({ ok: false } & JsonResponse)> {
    try {
      const res = await this.pool.request({
        method: req.method,
        path: req.path,
        headers: req.headers,
        body: req.body ?? null,
        signal: req.signal,
        headersTimeout: this.timeoutMs,
        bodyTimeout: this.timeoutMs,
      });
      if (res.statusCode >= 200 && res.statusCode < 300) return { ok: true, status: res.statusCode, body: res.body };
      const text = await res.body.text();
      let body: unknown = text;
      try {
        body = JSON.parse(text);
      } catch {
        // Keep the text.
      }
      return { ok: false, status: res.statusCode, headers: res.headers, body };
    } catch (err) {
      throw this.toUpstreamError(err);
    }
  }

  toUpstreamError(err: unknown): UpstreamError {
    if (err instanceof UpstreamError) return err;
    const e = err as { code?: string; name?: string; message?: string };
    const base = { provider: this.providerId, cause: err };
    if (e.name === 'AbortError' || e.code === 'UND_ERR_ABORTED') return new UpstreamError({ ...base, kind: 'aborted', message: 'request aborted' });
    if (e.code === 'UND_ERR_CONNECT_TIMEOUT') {
      return new UpstreamError({ ...base, kind: 'timeout', message: `no connection to ${this.providerId} within ${this.connectTimeoutMs} ms` });
    }
    if (err instanceof undiciErrors.HeadersTimeoutError || err instanceof undiciErrors.BodyTimeoutError) {
      return new UpstreamError({ ...base, kind: 'timeout', message: `no answer from ${this.providerId} within ${this.timeoutMs} ms` });
    }
    return new UpstreamError({ ...base, kind: 'connect', message: `cannot reach ${this.providerId}: ${e.code ?? e.message ?? 'connection failed'}` });
  }

  async close(): Promise<void> {
    await this.pool.close();
  }
}

/** Reads `retry-after` (seconds or HTTP date) and `retry-after-ms`. */
export function retryAfterSeconds(headers: Record<string, string | string[] | undefined>): number | undefined {
  const ms = Number(headers['retry-after-ms']);
  if (Number.isFinite(ms) && ms > 0) return Math.ceil(ms / 1000);
  const raw = headers['retry-after'];
  const value = Array.isArray(raw) ? raw[0] : raw;
  if (!value) return undefined;
  const s = Number(value);
  if (Number.isFinite(s)) return Math.max(0, Math.ceil(s));
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, Math.ceil((date - Date.now()) / 1000));
}

/** Pulls a human message out of the many error shapes providers use. */
export function upstreamErrorMessage(body: unknown): string {
  if (typeof body === 'string') return body.slice(0, 500) || 'no body';
  if (body === null || typeof body !== 'object') return 'no body';
  const b = body as { error?: unknown; message?: unknown; detail?: unknown };
  const inner = b.error && typeof b.error === 'object' ? (b.error as { message?: unknown }).message : b.error;
  for (const candidate of [inner, b.message, b.detail]) {
    if (typeof candidate === 'string' && candidate) return candidate;
    if (candidate && typeof candidate === 'object') return JSON.stringify(candidate).slice(0, 500);
  }
  return JSON.stringify(body).slice(0, 500);
}

/**
 * Collects a whole answer for {@link UpstreamHttp.json}: status, headers and
 * the body parsed as JSON (kept as text when it is not JSON). An abort of
 * `signal` ends the request on the wire, whether it waits for headers or
 * for the rest of the body.
 */
class JsonResponseHandler implements Dispatcher.DispatchHandler {
  private status = 0;
  private headers: Record<string, string | string[] | undefined> = {};
  private readonly chunks: Buffer[] = [];
  private controller: Dispatcher.DispatchController | null = null;
  private settled = false;
  private readonly onAbort: (() => void) | null = null;

  constructor(
    private readonly resolve: (res: JsonResponse) => void,
    private readonly reject: (err: unknown) => void,
    private readonly signal: AbortSignal | undefined,
  ) {
    if (!signal) return;
    if (signal.aborted) {
      this.fail(abortReason(signal));
      return;
    }
    this.onAbort = () => {
      const reason = abortReason(signal);
      if (this.controller) this.controller.abort(reason);
      else this.fail(reason);
    };
    signal.addEventListener('abort', this.onAbort, { once: true });
  }

  get aborted(): boolean {
    return this.settled;
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    if (this.settled) controller.abort(abortReason(this.signal));
    else this.controller = controller;
  }

  onResponseStart(_controller: Dispatcher.DispatchController, statusCode: number, headers: Record<string, string | string[] | undefined>): void {
    this.status = statusCode;
    this.headers = headers;
  }

  onResponseData(_controller: Dispatcher.DispatchController, chunk: Buffer): void {
    this.chunks.push(chunk);
  }

  onResponseEnd(): void {
    if (this.settled) return;
    this.settled = true;
    this.detach();
    const text = this.chunks.length === 1 ? (this.chunks[0] as Buffer).toString('utf8') : Buffer.concat(this.chunks).toString('utf8');
    let body: unknown = text;
    try {
      body = text.length > 0 ? JSON.parse(text) : null;
    } catch {
      // Keep the raw text: a non-JSON error page still says something.
    }
    this.resolve({ status: this.status, headers: this.headers, body });
  }

  onResponseError(_controller: Dispatcher.DispatchController | null, err: Error): void {
    this.fail(err);
  }

  private fail(err: unknown): void {
    if (this.settled) return;
    this.settled = true;
    this.detach();
    this.reject(err);
  }

  private detach(): void {
    if (this.onAbort) this.signal?.removeEventListener('abort', this.onAbort);
  }
}

function abortReason(signal: AbortSignal | undefined): Error {
  return new undiciErrors.RequestAbortedError(signal?.reason instanceof Error ? signal.reason.message : undefined);
}
