/** How long a refused embedding size is planned around before the provider is asked again (it may add the size). */
const REFUSAL_TTL_MS = 15 * 60_000;
/** Sizes are the client's choice: at most this many are remembered per provider, the oldest forgotten first. */
const MAX_REFUSALS = 256;

/**
 * Embedding sizes a provider refused for a model, remembered for a while, so that routing leaves its offer out at
 * once rather than asking again for another unbilled 400 before failing over (as the OpenAI-compatible adapter does
 * for a model seen ignoring `dimensions`). Any provider's: a native API's (Cohere, Mistral) or an OpenAI-compatible
 * host's (OVH, Azure), whose models each give sizes of their own. A small map in insertion order: at the cap, the
 * oldest entry goes.
 */
export class RefusedSizes {
  private readonly until = new Map<string, number>();

  add(upstreamModel: string, dimensions: number, now = Date.now()): void {
    const key = `${dimensions} ${upstreamModel}`;
    this.until.delete(key);
    if (this.until.size >= MAX_REFUSALS) {
      const oldest = this.until.keys().next().value;
      if (oldest !== undefined) this.until.delete(oldest);
    }
    this.until.set(key, now + REFUSAL_TTL_MS);
  }

  has(upstreamModel: string, dimensions: number, now = Date.now()): boolean {
    if (this.until.size === 0) return false;
    const key = `${dimensions} ${upstreamModel}`;
    const until = this.until.get(key);
    if (until === undefined) return false;
    if (until > now) return true;
    this.until.delete(key);
    return false;
  }
}

/** Each provider's memory, by its adapter (a reload's new adapter starts afresh, as it may serve other models). */
const byAdapter = new WeakMap<object, RefusedSizes>();

/** Remembers that `adapter`'s provider refused vectors `dimensions` long for `upstreamModel`. */
export function rememberRefusedSize(adapter: object, upstreamModel: string, dimensions: number): void {
  let sizes = byAdapter.get(adapter);
  if (!sizes) {
    sizes = new RefusedSizes();
    byAdapter.set(adapter, sizes);
  }
  sizes.add(upstreamModel, dimensions);
}

/** Whether `adapter`'s provider refused that size for that model in the last while. */
export function refusedSize(adapter: object, upstreamModel: string, dimensions: number): boolean {
  return byAdapter.get(adapter)?.has(upstreamModel, dimensions) ?? false;
}
