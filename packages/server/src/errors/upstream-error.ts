/** How an upstream call failed; decides failover and the client-facing code. */
export type UpstreamErrorKind = 'connect' | 'timeout' | 'http' | 'protocol' | 'aborted';

export interface UpstreamErrorInit {
  kind: UpstreamErrorKind;
  provider: string;
  message: string;
  status?: number;
  retryAfterS?: number;
  /** What the provider said in full, for the operator's log when the message clients get is shorter. */
  detail?: string;
  /** The client's field the provider refused, when known (a refusal's `param`). */
  param?: string;
  /** Refused by this provider alone, so worth the next offer whatever its status (see {@link UpstreamError.elsewhere}). */
  elsewhere?: boolean;
  /** A timeout waiting for the answer's headers: the read timeout (`timeoutMs`) it waited (see {@link UpstreamError.headersWaitMs}). */
  headersWaitMs?: number;
  cause?: unknown;
}

export class UpstreamError extends Error {
  readonly kind: UpstreamErrorKind;
  readonly provider: string;
  readonly status: number | undefined;
  readonly retryAfterS: number | undefined;
  readonly detail: string;
  readonly param: string | null;
  readonly elsewhere: boolean;
  /**
   * Set on a timeout that came before the answer's headers: how long it waited (the provider's `timeoutMs`). A
   * non-streamed answer's headers come only after its whole generation, so upstream-call.ts weighs it against the
   * completion asked for. Undefined for every other failure (a connect or body timeout among them).
   */
  readonly headersWaitMs: number | undefined;

  constructor(init: UpstreamErrorInit) {
    super(init.message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = 'UpstreamError';
    this.kind = init.kind;
    this.provider = init.provider;
    this.status = init.status;
    this.retryAfterS = init.retryAfterS;
    this.detail = init.detail ?? init.message;
    this.param = init.param ?? null;
    this.elsewhere = init.elsewhere ?? false;
    this.headersWaitMs = init.headersWaitMs;
  }

  /**
   * This refusal, as one the next offer may not make: a 413 is the body over that host's own size limit (OVHcloud's
   * 2 MB JSON, Scaleway's 25 MB files), which other hosts of the model set higher. It then fails over; the last
   * offer's is still the client's 400.
   */
  refusedHereOnly(): UpstreamError {
    return new UpstreamError({
      kind: this.kind,
      provider: this.provider,
      message: this.message,
      detail: this.detail,
      elsewhere: true,
      cause: this,
      ...(this.status === undefined ? {} : { status: this.status }),
      ...(this.param === null ? {} : { param: this.param }),
    });
  }

  /** Worth trying the next offer: the provider, not the request, is at fault. */
  get retryable(): boolean {
    if (this.kind === 'aborted') return false;
    if (this.elsewhere) return true;
    if (this.kind !== 'http' || this.status === undefined) return true;
    // 401/403/404 from a provider mean its key or model is wrong: the next provider may still serve.
    return this.status >= 500 || [401, 403, 404, 408, 429].includes(this.status);
  }

  /** The client's request itself was refused by the provider (bad input). */
  get clientFault(): boolean {
    return this.kind === 'http' && !this.elsewhere && (this.status === 400 || this.status === 413 || this.status === 422);
  }
}
