import { errorJson, type Variant } from '@gw/schema';
import { IDEMPOTENCY_RETENTION_MS, type StoredAnswer } from './idempotency.js';

/** Keys with an allowance past which the expired ones are swept before another is added. */
const SWEEP_AT = 10_000;

/**
 * How much answer data each API key may have kept for repeats of its `X-Idempotency-Key` requests, per instance,
 * counted over a window of the answers' retention from the first answer kept in it. Without it one key's cheap
 * requests filled Redis or the database: 2,048 one-token embeddings of 3,584 floats answer 76 MB of JSON for
 * 2,048 tokens, each kept 24 hours.
 */
export class KeptAnswerAllowance {
  private readonly byKey = new Map<string, { bytes: number; until: number }>();
  /**
   * Swept again once the map has doubled since: swept at every new key past SWEEP_AT, 30,000 keys kept within a day
   * each found 20,000 live ones to walk, and adding them held the event loop for 10 s in all (40,000 more, 70 s).
   */
  private sweepAt = SWEEP_AT;

  constructor(
    readonly limitBytes: number,
    private readonly windowMs = IDEMPOTENCY_RETENTION_MS,
  ) {}

  /** Takes `bytes` of the key's allowance: false, taking nothing, when they do not fit in what is left of it. */
  take(keyId: string, bytes: number): boolean {
    const now = Date.now();
    let used = this.byKey.get(keyId);
    if (used === undefined || used.until <= now) {
      if (used === undefined && this.byKey.size >= this.sweepAt) this.sweep(now);
      used = { bytes: 0, until: now + this.windowMs };
      this.byKey.set(keyId, used);
    }
    if (used.bytes + bytes > this.limitBytes) return false;
    used.bytes += bytes;
    return true;
  }

  private sweep(now: number): void {
    for (const [keyId, used] of this.byKey) if (used.until <= now) this.byKey.delete(keyId);
    this.sweepAt = Math.max(SWEEP_AT, 2 * this.byKey.size);
  }
}

/**
 * What a repeat is answered in place of an answer not kept: 422, as for an answer whose instance died before it was
 * kept. Stored as any answer (an instance of an earlier release replays it too); the repeat is in the first
 * request's variant, which its path, part of the fingerprint, fixes.
 */
export function notKeptAnswer(status: number, bytes: number, limitBytes: number, variant: Variant): StoredAnswer {
  const { status: refused, body } = errorJson('unprocessable', variant, notKeptMessage(status, bytes, limitBytes), 'X-Idempotency-Key');
  return { status: refused, headers: { 'content-type': 'application/json; charset=utf-8' }, body };
}

/** What a repeat is told of an answer not kept: a JSON one's stored 422, or a stream's once its events are gone. */
export function notKeptMessage(status: number, bytes: number, limitBytes: number): string {
  return (
    `The request first sent with this X-Idempotency-Key was answered (${status}) and billed, but its answer (${bytes} bytes) was not ` +
    `kept for a repeat: it is more than is left of the ${limitBytes / 2 ** 20} MiB of answers this API key may have kept ` +
    'for 24 hours (GW_IDEMPOTENCY_KEPT_MB); send the request again with a new key to run it anew.'
  );
}
