import { GatewayError } from '../errors/gateway-error.js';
import type { Bus } from '../kv/types.js';
import { steadyMs } from '../lib/clock.js';
import type { Store, Workspace } from '../store/types.js';
import { stillTrusted } from './api-keys.js';

/** A workspace as cached: its allow-list also as a set, made once per read, so that each request's check is one lookup. */
export interface CachedWorkspace extends Workspace {
  readonly enabled: ReadonlySet<string> | null;
}

/** Workspaces read through a short cache, kept while the store is unreachable. */
export class WorkspaceCache {
  private readonly entries = new Map<string, { ws: CachedWorkspace | null; at: number }>();
  /** Counts forgets: a read that began before one may return the workspace as it was, and is then not cached. */
  private forgets = 0;

  constructor(
    private readonly store: Store,
    private readonly ttlMs: number,
    /** Where changes are heard: while it cannot hear them, a copy is trusted only briefly (DEAF_TRUST_MS). */
    private readonly bus: Pick<Bus, 'deafSince'>,
  ) {}

  /** At once (no promise) when a fresh entry is cached, the usual case; a promise when the store must be read. */
  get(id: string): CachedWorkspace | null | Promise<CachedWorkspace | null> {
    const hit = this.entries.get(id);
    return hit && stillTrusted(hit.at, this.ttlMs, this.bus.deafSince()) ? hit.ws : this.read(id);
  }

  private async read(id: string): Promise<CachedWorkspace | null> {
    const hit = this.entries.get(id);
    const forgets = this.forgets;
    try {
      const read = await this.store.workspaces.get(id);
      const ws = read === null ? null : { ...read, enabled: read.enabledModels === null ? null : new Set(read.enabledModels) };
      if (forgets === this.forgets) this.entries.set(id, { ws, at: steadyMs() });
      return ws;
    } catch (err) {
      if (hit) return hit.ws;
      throw new GatewayError('store_unavailable', 'The workspace store is unreachable; please retry shortly.', { retryAfterS: 1, cause: err });
    }
  }

  forget(id: string): void {
    this.forgets++;
    this.entries.delete(id);
  }

  /** Every workspace read again at its next use: changes announced while the bus was away were not heard. */
  forgetAll(): void {
    this.forgets++;
    this.entries.clear();
  }
}
