import type { CanonicalCode } from '@gw/schema';

export interface GatewayErrorOptions {
  param?: string | null;
  /** Seconds; rendered as Retry-After. */
  retryAfterS?: number;
  headers?: Record<string, string>;
  cause?: unknown;
}

/** An error with a canonical code; each variant renders it with its own status and code. */
export class GatewayError extends Error {
  readonly code: CanonicalCode;
  readonly param: string | null;
  readonly retryAfterS: number | undefined;
  readonly headers: Record<string, string>;

  constructor(code: CanonicalCode, message: string, options: GatewayErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'GatewayError';
    this.code = code;
    this.param = options.param ?? null;
    this.retryAfterS = options.retryAfterS;
    this.headers = options.headers ?? {};
  }
}

export function isGatewayError(err: unknown): err is GatewayError {
  return err instanceof GatewayError;
}
