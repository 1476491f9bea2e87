import { GatewayError } from '../errors/gateway-error.js';
import type { Store, Workspace } from '../store/types.js';

/** Workspaces read through a short cache, kept while the store is unreachable. */
export class WorkspaceCache {
  private readonly entries = new Map<string, { ws: Workspace | null; at: number }>();

  constructor(
    private readonly store: Store,
    private readonly ttlMs: number,
  ) {}

  /** At once (no promise) when a fresh entry is cached, the usual case; a promise when the store must be read. */
  get(id: string): Workspace | null | Promise<Workspace | null> {
    const hit = this.entries.get(id);
    return hit && Date.now() - hit.at < this.ttlMs ? hit.ws : this.read(id);
  }

  private async read(id: string): Promise<Workspace | null> {
    const hit = this.entries.get(id);
    try {
      const ws = await this.store.workspaces.get(id);
      this.entries.set(id, { ws, at: Date.now() });
      return ws;
    } catch (err) {
      if (hit) return hit.ws;
      throw new GatewayError('store_unavailable', 'The workspace store is unreachable; please retry shortly.', { retryAfterS: 1, cause: err });
    }
  }

  forget(id: string): void {
    this.entries.delete(id);
  }
}
