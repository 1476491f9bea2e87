import type { CanonicalCode } from '@gw/schema';

export interface GatewayErrorOptions {
  param?: string | null;
  /** Seconds; rendered as Retry-After (and as retry-after-ms, times 1000, when `retryAfterMs` is not given). */
  retryAfterS?: number;
  /**
   * The exact wait where it is known, in ms: rendered as retry-after-ms (rounded up), which the OpenAI SDK reads before
   * Retry-After, and as Retry-After in whole seconds (rounded up, at least 1) when `retryAfterS` is not given.
   */
  retryAfterMs?: number;
  headers?: Record<string, string>;
  cause?: unknown;
}

/** An error with a canonical code; each variant renders it with its own status and code. */
export class GatewayError extends Error {
  readonly code: CanonicalCode;
  readonly param: string | null;
  readonly retryAfterS: number | undefined;
  readonly retryAfterMs: number | undefined;
  readonly headers: Record<string, string>;

  constructor(code: CanonicalCode, message: string, options: GatewayErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'GatewayError';
    this.code = code;
    this.param = options.param ?? null;
    const ms = options.retryAfterMs;
    this.retryAfterS = options.retryAfterS ?? (ms === undefined ? undefined : waitSeconds(ms));
    this.retryAfterMs = ms !== undefined ? Math.max(0, Math.ceil(ms)) : this.retryAfterS === undefined ? undefined : this.retryAfterS * 1000;
    this.headers = options.headers ?? {};
  }
}

/** How a message of `out_of_resources` ends, for the client (the log says the rest). */
export const SEND_AGAIN = '; send the request again.';

/** A wait in ms as Retry-After's whole seconds: rounded up, at least 1. */
export function waitSeconds(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000));
}

export function isGatewayError(err: unknown): err is GatewayError {
  return err instanceof GatewayError;
}
