/** One simulated provider: a node:http server that routes, authenticates, injects faults and counts. */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type ModelInfo, modelInfo } from '../catalogue/model-info.js';
import type { Fault, ProviderSettings, WireType } from '../types.js';
import type { ErrorSpec, HandlerCtx, ProviderView, RenderedError, Reply, Wire } from '../wire/types.js';
import { handleControl } from './control.js';
import { FaultState } from './faults.js';
import { flatHeaders, sendJson } from './http.js';
import { summarize } from './multipart.js';
import { parseBody, targetOf } from './request.js';
import { resetConnection, sleep, writeBody, writeSse } from './respond.js';
import { StatsRecorder } from './stats.js';

const ANONYMOUS_RPM = 2;

export interface ProviderDef {
  id: string;
  type: WireType;
  region: string;
  apiKey: string;
  settings: ProviderSettings;
  models: string[];
  wire: Wire;
  /** Path prefix of `baseUrl` ('/v1', or '' for an origin). */
  basePath: string;
}

export class ProviderServer implements ProviderView {
  readonly id: string;
  readonly region: string;
  readonly type: WireType;
  readonly apiKey: string;
  readonly faults: FaultState;
  readonly stats: StatsRecorder;
  settings: ProviderSettings;
  private hosted: string[];
  private readonly server: Server;
  private port = 0;
  private readonly anonymous = new Map<string, number[]>();

  constructor(
    private readonly def: ProviderDef,
    private readonly host: string,
  ) {
    this.id = def.id;
    this.region = def.region;
    this.type = def.type;
    this.apiKey = def.apiKey;
    this.faults = new FaultState(def.type);
    this.settings = { ...def.settings };
    this.hosted = [...def.models];
    this.stats = new StatsRecorder(def.id);
    this.server = createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
      this.handle(req, res).catch((err: unknown) => this.crash(res, err));
    });
  }

  get url(): string {
    return `http://${this.host.includes(':') ? `[${this.host}]` : this.host}:${this.port}`;
  }

  get baseUrl(): string {
    return this.url + this.def.basePath;
  }

  listen(port: number): Promise<void> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, this.host, () => {
        this.port = (this.server.address() as AddressInfo).port;
        resolve();
      });
    });
  }

  close(): Promise<void> {
    return new Promise((resolve) => {
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
  }

  hosts(model: string): boolean {
    return this.hosted.includes(model);
  }

  models(): string[] {
    return [...this.hosted];
  }

  setModels(models: string[]): void {
    this.hosted = [...new Set(models)];
  }

  info(model: string): ModelInfo {
    return modelInfo(model);
  }

  configure(settings: Partial<ProviderSettings>): void {
    validateSettings(settings);
    this.settings = { ...this.settings, ...settings };
  }

  /** Faults cleared, stats zeroed, default models and settings restored. */
  reset(): void {
    this.faults.clear();
    this.stats.reset();
    this.hosted = [...this.def.models];
    this.settings = { ...this.def.settings };
    this.anonymous.clear();
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { method, path, query } = targetOf(req);
    if (path.startsWith('/__sim/')) return handleControl(this, req, res, path);
    const ac = new AbortController();
    res.on('close', () => ac.abort());
    const route = this.def.wire.route(method, path);
    const parsed = await parseBody(req, route);
    // A body over the host's cap is refused unread, but counted: the tests see what the gateway sent.
    const body = parsed === 'too_large' ? null : parsed;
    const { json, multipart, model, stream } = body ?? { json: null, multipart: null, model: null, stream: false };
    const endpoint = route?.endpoint ?? null;
    const rec = this.stats.begin({
      at: Date.now(),
      method,
      path,
      endpoint,
      model,
      stream,
      status: null,
      fault: null,
      query: Object.fromEntries(query),
      headers: flatHeaders(req.headers),
      body: multipart ? summarize(multipart) : (json ?? null),
    });
    res.on('close', () => this.stats.finish(rec, res.headersSent ? res.statusCode : 0));
    if (body === null) return this.sendError(res, { status: 413, kind: 'too_large' });

    const auth = this.def.wire.auth(req.headers, this.apiKey);
    if (auth === 'missing' || auth === 'invalid') {
      this.stats.authFailure();
      await sleep(this.settings.latencyMs, ac.signal);
      return this.sendError(res, { status: 401, kind: auth === 'missing' ? 'auth_missing' : 'auth_invalid' });
    }
    if (auth === 'anonymous' && !this.anonymousAllowed(model)) {
      const message = `Anonymous rate limit reached (${ANONYMOUS_RPM} requests per minute per model): use an API key.`;
      return this.sendError(res, { status: 429, kind: 'rate_limit', message }, { 'retry-after': '60' });
    }
    if (route === null) return this.sendError(res, { status: 404, kind: 'route_not_found' });
    if (body.badBody !== null) return this.sendError(res, { status: 400, kind: 'bad_request', message: body.badBody });

    const fault = this.faults.take({ endpoint: route.endpoint, model, stream });
    if (fault) this.stats.fault(rec, fault.kind);
    const pre = this.settings.latencyMs + (fault?.kind === 'latency' ? fault.ms : 0);
    if (fault?.kind === 'hang' && fault.afterChunks === undefined) return; // accepted, never answered
    if (!(await sleep(pre, ac.signal))) return;
    if (fault?.kind === 'reset' && fault.afterChunks === undefined) return resetConnection(res);
    if (fault?.kind === 'status') return this.sendFaultStatus(res, fault, model, ac.signal);

    const ctx: HandlerCtx = { provider: this, method, path, query, headers: req.headers, json, multipart, model, fault };
    return this.send(res, route.handle(ctx), fault, ac.signal);
  }

  private async send(res: ServerResponse, reply: Reply, fault: Fault | null, signal: AbortSignal): Promise<void> {
    const base = this.def.wire.headers?.() ?? {};
    const s = this.settings;
    switch (reply.type) {
      case 'error': {
        const e = this.def.wire.error(reply.error);
        return writeBody(res, e.status, { ...base, ...e.headers, 'content-type': 'application/json' }, JSON.stringify(e.body), { fault, signal });
      }
      case 'json':
      case 'text': {
        const work = reply.tokens === undefined ? 0 : s.ttftMs + s.chunkGapMs * reply.tokens;
        if (!(await sleep(work, signal))) return;
        const body = reply.type === 'json' ? JSON.stringify(reply.body) : reply.body;
        const contentType = reply.type === 'json' ? 'application/json' : reply.contentType;
        return writeBody(res, reply.status ?? 200, { ...base, ...reply.headers, 'content-type': contentType }, body, { fault, signal });
      }
      case 'sse': {
        const headers = {
          ...base,
          ...reply.headers,
          'content-type': this.def.wire.sseContentType ?? 'text/event-stream',
          'cache-control': 'no-cache',
        };
        return writeSse(res, { headers }, reply.events, {
          done: reply.done,
          timing: { ttftMs: s.ttftMs, gapMs: s.chunkGapMs },
          fault,
          signal,
          errorData: (f) => this.def.wire.error(faultErrorSpec(f)).body,
        });
      }
    }
  }

  private sendFaultStatus(res: ServerResponse, f: Extract<Fault, { kind: 'status' }>, model: string | null, signal: AbortSignal): Promise<void> {
    const spec: ErrorSpec = {
      status: f.status,
      kind: kindOf(f.status),
      fixed: true,
      ...(f.message === undefined ? {} : { message: f.message }),
      ...(f.variant === undefined ? {} : { variant: f.variant }),
      ...(model ? { model } : {}),
      retryAfterS: waitSeconds(f.retryAfter),
    };
    const e = this.def.wire.error(spec);
    const headers: Record<string, string> = { ...this.def.wire.headers?.(), ...e.headers, 'content-type': 'application/json' };
    const wantsDefault = (f.status === 429 || f.status === 503) && e.noRetryAfter !== true;
    const retryAfter = f.retryAfter === undefined ? (wantsDefault ? (headers['retry-after'] ?? '1') : undefined) : f.retryAfter;
    if (retryAfter === null || retryAfter === undefined) delete headers['retry-after'];
    else headers['retry-after'] = String(retryAfter);
    if (f.retryAfterMs !== undefined) headers['retry-after-ms'] = String(f.retryAfterMs);
    Object.assign(headers, f.headers);
    return writeBody(res, e.status, headers, JSON.stringify(e.body), { fault: null, signal });
  }

  sendError(res: ServerResponse, spec: ErrorSpec, extra: Record<string, string> = {}): void {
    if (res.headersSent) return void res.end();
    const e: RenderedError = this.def.wire.error(spec);
    sendJson(res, e.status, e.body, { ...this.def.wire.headers?.(), ...e.headers, ...extra });
  }

  /** OVH serves key-less calls at 2 requests per minute per model (PROVIDERS §6). */
  private anonymousAllowed(model: string | null): boolean {
    const key = model ?? '';
    const now = Date.now();
    const recent = (this.anonymous.get(key) ?? []).filter((t) => now - t < 60_000);
    const ok = recent.length < ANONYMOUS_RPM;
    if (ok) recent.push(now);
    this.anonymous.set(key, recent);
    return ok;
  }

  private crash(res: ServerResponse, err: unknown): void {
    const message = err instanceof Error ? err.message : String(err);
    if (res.headersSent) return void res.destroy();
    this.sendError(res, { status: 500, kind: 'server', message: `simulator error: ${message}` });
  }
}

const STYLES = new Set(['reasoning_content', 'reasoning', 'split', 'think_tags']);

/**
 * Throws a readable error for a setting of the wrong type: timings are added to each other, so a string such as
 * "5000" (a form or an environment variable) would make 35 ms of latency "500035" ms.
 */
function validateSettings(s: Partial<ProviderSettings>): void {
  for (const k of ['latencyMs', 'ttftMs', 'chunkGapMs'] as const) {
    const v = s[k];
    if (v !== undefined && (typeof v !== 'number' || !Number.isFinite(v) || v < 0)) throw new Error(`settings.${k} must be a number >= 0`);
  }
  if (s.reasoningStyle !== undefined && !STYLES.has(s.reasoningStyle)) throw new Error(`settings.reasoningStyle must be one of ${[...STYLES].join(', ')}`);
  for (const k of ['asyncContentFilter', 'toolCallFragments'] as const) {
    if (s[k] !== undefined && typeof s[k] !== 'boolean') throw new Error(`settings.${k} must be true or false`);
  }
  const n = s.answerTokens;
  if (n !== undefined && n !== null && (!Number.isInteger(n) || n < 0)) throw new Error('settings.answerTokens must be null or a whole number');
}

/** A status fault's Retry-After in whole seconds (a date's distance from now); 1 where it names none or is no wait. */
function waitSeconds(v: number | string | null | undefined): number {
  let s = Number.NaN;
  if (typeof v === 'number') s = Math.ceil(v);
  else if (typeof v === 'string') s = /^\s*\d+\s*$/.test(v) ? Number(v) : Math.ceil((Date.parse(v) - Date.now()) / 1000);
  return Number.isFinite(s) ? Math.max(0, s) : 1;
}

export function kindOf(status: number): ErrorSpec['kind'] {
  switch (status) {
    case 400:
      return 'bad_request';
    case 401:
    case 403:
      return 'auth_invalid';
    case 404:
      return 'model_not_found';
    case 413:
      return 'too_large';
    case 429:
      return 'rate_limit';
    case 500:
      return 'server';
    case 502:
      return 'bad_gateway';
    case 503:
      return 'unavailable';
    case 504:
      return 'timeout';
    default:
      return 'other';
  }
}

function faultErrorSpec(f: Fault): ErrorSpec {
  const status = f.kind === 'error_after_200' ? (f.status ?? 500) : 500;
  const message = f.kind === 'error_after_200' ? f.message : undefined;
  return { status, kind: kindOf(status), fixed: true, ...(message === undefined ? {} : { message }) };
}
