/** The contract between the generic server core and one provider's wire format. */
import type { IncomingHttpHeaders } from 'node:http';
import type { ModelInfo } from '../catalogue/model-info.js';
import type { Multipart } from '../core/multipart.js';
import type { Endpoint, Fault, ProviderSettings, WireType } from '../types.js';

/** A provider error to render in that provider's own shape. */
export type ErrorKind =
  | 'auth_missing'
  | 'auth_invalid'
  | 'route_not_found'
  | 'model_not_found'
  | 'bad_request'
  | 'too_large'
  | 'rate_limit'
  | 'server'
  | 'bad_gateway'
  | 'unavailable'
  | 'timeout'
  | 'other';

export interface ErrorSpec {
  status: number;
  kind: ErrorKind;
  message?: string;
  param?: string | null;
  variant?: number;
  /** The model the request named (for messages). */
  model?: string;
  /** A status fault's wait in whole seconds, for a provider whose body or headers tell it besides Retry-After (Azure). */
  retryAfterS?: number;
  /** Keep `status` as is (a fault chose it); otherwise a renderer may use the provider's own status for `kind`. */
  fixed?: boolean;
}

export interface RenderedError {
  status: number;
  body: unknown;
  headers?: Record<string, string>;
  /** The provider sends no Retry-After with this error (so a status fault adds none by default). */
  noRetryAfter?: boolean;
}

export interface SseEvent {
  /** Named event (`event:` line); omitted for plain data events. */
  event?: string;
  data: unknown;
}

export type Reply =
  | { type: 'json'; status?: number; body: unknown; headers?: Record<string, string>; tokens?: number }
  | { type: 'text'; status?: number; body: string; contentType: string; headers?: Record<string, string>; tokens?: number }
  | { type: 'sse'; events: SseEvent[]; done: boolean; headers?: Record<string, string> }
  | { type: 'error'; error: ErrorSpec };

/** What a handler sees of its provider. */
export interface ProviderView {
  id: string;
  region: string;
  settings: ProviderSettings;
  hosts(model: string): boolean;
  models(): string[];
  info(model: string): ModelInfo;
}

export interface HandlerCtx {
  provider: ProviderView;
  method: string;
  path: string;
  query: URLSearchParams;
  headers: IncomingHttpHeaders;
  /** Parsed JSON body (`undefined` when the route takes none). */
  json: unknown;
  multipart: Multipart | null;
  /** Model named by the request (body, form field or Azure deployment), if any. */
  model: string | null;
  /** The fault applied to this request, if any (handlers use it for content_filter). */
  fault: Fault | null;
}

export interface Route {
  endpoint: Endpoint;
  body: 'json' | 'multipart' | 'none';
  /** The host's own cap on the request body, past which it answers 413 (default: 30 MB uploads, 10 MB JSON). */
  maxBytes?: number;
  /** Model taken from the path (Azure deployment). */
  pathModel?: string;
  /** Whether the parsed body asks for a stream (checked after parsing). */
  handle(ctx: HandlerCtx): Reply;
}

export type AuthResult = 'ok' | 'missing' | 'invalid' | 'anonymous';

export interface Wire {
  type: WireType;
  route(method: string, path: string): Route | null;
  auth(headers: IncomingHttpHeaders, apiKey: string): AuthResult;
  error(spec: ErrorSpec): RenderedError;
  /** Headers this provider puts on every response. */
  headers?(): Record<string, string>;
  /** SSE content type (default `text/event-stream`). */
  sseContentType?: string;
}
