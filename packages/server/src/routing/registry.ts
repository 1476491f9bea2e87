import type { GatewayFileConfig, ModelConfig, ModelKind, Pricing } from '@gw/schema';
import { waitAtMost } from '../lib/wait-at-most.js';
import type { ProviderAdapter } from '../providers/types.js';

/** One provider's offer of a model, as the registry holds it while the provider lists it. */
export interface Offer {
  provider: string;
  region: string;
  upstreamModel: string;
  pricing: Pricing;
}

export interface RegistryModel {
  id: string;
  kind: ModelKind;
  owned_by: string;
  context_window: number;
  capabilities: string[];
  deprecated: boolean;
  beta: boolean;
  /** Offers whose provider's own model list names the upstream model, in configured order. */
  offers: Offer[];
  /** Unix seconds when the model first entered the registry of any instance sharing this store (kept in its settings). */
  created: number;
  /** Providers configured to serve it whose model list has not been read since the gateway started (unknown yet, not refused). */
  unread?: string[];
}

export type ProviderListStatus = 'ok' | 'stale' | 'error';

export interface RebuildReport {
  models: number;
  providers: Record<string, ProviderListStatus>;
  /** Configured models none of whose offers a provider lists now: left out, answering model_not_found. */
  unlisted: string[];
}

const LIST_TIMEOUT_MS = 10_000;
/** How long a rebuild waits for the store to tell a new model's `created`; past it, this instance's own time stands for now. */
const CREATED_TIMEOUT_MS = 2_000;

/**
 * The `created` the models keep: the time the first instance that shared this store saw each (stored if absent, so
 * that every instance and every restart lists the same one), given the time this instance saw them; all at once, as
 * a restart asks it of the whole catalogue.
 */
export type KeepCreated = (seenAt: ReadonlyMap<string, number>) => Promise<ReadonlyMap<string, number>>;

/**
 * Each provider's last read model list, kept in the store (its settings), so that an instance that cannot read a
 * list (started, restarted or scaled out while the provider's list is down) serves by the last one any instance
 * sharing the store read, as one that had been running would, rather than drop the provider's models.
 */
export interface ListKeeper {
  load(provider: string): Promise<string | null>;
  save(provider: string, value: string): Promise<void>;
}

/** A kept list, or null for a value that is none (written by another release, or by hand). */
function readKept(value: string): KeptList | null {
  try {
    const kept = JSON.parse(value) as Partial<KeptList> | null;
    const models = kept?.models;
    const listed = models === null || (Array.isArray(models) && models.every((m) => typeof m === 'string'));
    return typeof kept?.baseUrl === 'string' && typeof kept.at === 'number' && listed ? (kept as KeptList) : null;
  } catch {
    return null;
  }
}

/** A kept list's `at`, between its base URL and its models. */
const KEPT_AT = /^\d+$/;

/** A list as kept: for the base URL it was read from (a provider id given another address starts afresh), and when. */
interface KeptList {
  baseUrl: string;
  at: number;
  models: string[] | null;
}
/** The least time between two rebuilds asked for by a provider saying it has no model an offer names (`recheck`). */
export const LIST_RECHECK_GAP_MS = 60_000;
/** The first retry after a provider's list could not be read, doubling each time up to the cap (jobs/registry-refresh.ts). */
export const LIST_RETRY_FIRST_S = 5;
const DEFAULT_CONTEXT_WINDOW = 32_768;

/**
 * The live model registry: the configured catalogue, narrowed to the offers
 * that each provider's own model list names now. A provider whose list
 * cannot be fetched keeps its last good list.
 */
export class ModelRegistry {
  private models = new Map<string, RegistryModel>();
  /** Models left out only because a provider that may serve them has had no readable list since start: by id, those providers. */
  private unread = new Map<string, { model: RegistryModel; providers: string[] }>();
  /**
   * Each provider's last list, of the names its offers give only (an aggregator lists tens of thousands the gateway
   * never routes to); null where the provider lists nothing offers name, so every configured offer stands.
   */
  private readonly lists = new Map<string, Set<string> | null>();
  /** The upstream names each provider's offers give. */
  private readonly named = new Map<string, Set<string>>();
  private readonly firstSeen = new Map<string, number>();
  /** Models whose `created` came from the store (the others are asked again at each rebuild). */
  private readonly createdKept = new Set<string>();
  private inFlight: Promise<RebuildReport> | null = null;
  /** The rebuild that follows the one in flight, shared by every call made meanwhile. */
  private queued: Promise<RebuildReport> | null = null;
  private readonly rebuiltListeners: ((report: RebuildReport) => void)[] = [];
  private readonly changedListeners: (() => void)[] = [];
  private recheckedAt = Number.NEGATIVE_INFINITY;
  /** The providers whose list the last rebuild could not read, and what that left (/readyz shows them). */
  private unreadLists: Record<string, Exclude<ProviderListStatus, 'ok'>> = {};
  /** When each provider's list in `lists` was read (ms), by this instance or by the one that kept it in the store. */
  private readonly listAt = new Map<string, number>();
  /** The configured models by id: a lookup of one not in the registry is one read, not a walk of the catalogue. */
  private readonly configured: ReadonlyMap<string, ModelConfig>;

  constructor(
    private readonly catalogue: GatewayFileConfig,
    private readonly adapters: ReadonlyMap<string, ProviderAdapter>,
    /** Told of each provider whose list could not be fetched (`kept`: its last good list stays). */
    private readonly onListFailure: (provider: string, err: unknown, kept: boolean) => void = () => {},
    private readonly keepCreated: KeepCreated | null = null,
    private readonly keeper: ListKeeper | null = null,
  ) {
    this.configured = new Map(catalogue.models.map((m) => [m.id, m]));
    for (const m of catalogue.models) {
      for (const o of m.offers) {
        const names = this.named.get(o.provider) ?? new Set<string>();
        names.add(o.upstreamModel);
        this.named.set(o.provider, names);
      }
    }
  }

  /** The names of a provider's list that its offers give: all the registry reads of it. */
  private namedIn(provider: string, ids: readonly string[]): Set<string> {
    const named = this.named.get(provider);
    const listed = new Set<string>();
    if (named !== undefined) for (const id of ids) if (named.has(id)) listed.add(id);
    return listed;
  }

  get(id: string): RegistryModel | undefined {
    return this.models.get(id) ?? this.models.get(this.aliased(id));
  }

  /**
   * The model `family/model:eu` names when no model has that id: `:eu` asks for EU hosting, which every offer here
   * already is. A model configured as `family/model:eu` is itself, never `family/model`, even while unlisted.
   */
  private aliased(id: string): string {
    return id.endsWith(':eu') && !this.configured.has(id) ? id.slice(0, -3) : id;
  }

  /**
   * A model the registry lacks only because no list of a provider configured to serve it could be read since start
   * (with the providers), so that a request for it is told the provider is unreachable, not that the model does not exist.
   */
  unreadable(id: string): { model: RegistryModel; providers: string[] } | undefined {
    return this.unread.get(id) ?? this.unread.get(this.aliased(id));
  }

  /** The id of a model the configuration names (`:eu` allowed), whether or not a provider lists it right now. */
  configuredId(id: string): string | undefined {
    return this.configured.get(this.aliased(id))?.id;
  }

  /**
   * A model the configuration names that no provider lists right now (every offer unlisted): its configured id, kind
   * and beta flag, and its providers' ids, for a refusal that says so rather than that it does not exist.
   */
  unlistedModel(id: string): { id: string; kind: ModelKind; beta: boolean; providers: string[] } | undefined {
    const model = this.configured.get(this.aliased(id));
    if (!model || model.deprecated || this.models.has(model.id)) return undefined;
    return { id: model.id, kind: model.kind, beta: model.beta ?? false, providers: [...new Set(model.offers.map((o) => o.provider))] };
  }

  /** The providers whose model list the last rebuild could not read: `stale` (its last known list kept) or `error` (none yet). */
  failingLists(): Readonly<Record<string, Exclude<ProviderListStatus, 'ok'>>> {
    return this.unreadLists;
  }

  list(): RegistryModel[] {
    return [...this.models.values()];
  }

  providerIds(): string[] {
    return this.catalogue.providers.map((p) => p.id);
  }

  /**
   * Re-reads every provider's model list, in a rebuild that starts no earlier than this call: one in flight may have
   * read a list before a change the caller made upstream (an admin's rebuild answered with the list it had just
   * changed), so a call made meanwhile waits for one more, which every such call shares.
   */
  rebuild(): Promise<RebuildReport> {
    if (this.inFlight === null) return this.startRebuild();
    this.queued ??= this.inFlight
      .catch(() => undefined)
      .then(() => {
        this.queued = null;
        return this.startRebuild();
      });
    return this.queued;
  }

  /**
   * A provider answered 404 for an offer's model (retired or renamed there): the lists are read again now, at most
   * once a minute, so that a model gone upstream leaves the registry (model_not_found, or the next offer) within
   * moments rather than at the next scheduled rebuild, hours of 502s and 503s later.
   */
  recheck(): void {
    const now = performance.now();
    if (now - this.recheckedAt < LIST_RECHECK_GAP_MS) return;
    this.recheckedAt = now;
    // A list that cannot be read is told through onListFailure, as at any rebuild.
    this.rebuild().catch(() => {});
  }

  private startRebuild(): Promise<RebuildReport> {
    const run = this.doRebuild()
      .then((report) => {
        for (const listener of this.rebuiltListeners) listener(report);
        return report;
      })
      .finally(() => {
        if (this.inFlight === run) this.inFlight = null;
      });
    this.inFlight = run;
    return run;
  }

  /** Called after every rebuild, whoever asked for it (the schedule, the admin API). */
  onRebuilt(listener: (report: RebuildReport) => void): void {
    this.rebuiltListeners.push(listener);
  }

  /** Called after a rebuild that read a list other than the one the store kept: the first instance to see a change upstream. */
  onListsChanged(listener: () => void): void {
    this.changedListeners.push(listener);
  }

  private async doRebuild(): Promise<RebuildReport> {
    // Keyed in the config's order, whichever provider answers first.
    const providers: Record<string, ProviderListStatus> = Object.fromEntries(this.catalogue.providers.map((p) => [p.id, 'error']));
    let changed = false;
    await Promise.all(
      this.catalogue.providers.map(async (p) => {
        const adapter = this.adapters.get(p.id);
        const signal = AbortSignal.timeout(LIST_TIMEOUT_MS);
        try {
          if (!adapter) throw new Error(`no adapter for provider type ${p.type}`);
          const ids = await adapter.listModels(signal);
          this.lists.set(p.id, ids === null ? null : this.namedIn(p.id, ids));
          this.listAt.set(p.id, Date.now());
          providers[p.id] = 'ok';
          if (await this.keepList(p.id, p.baseUrl, ids)) changed = true;
        } catch (err) {
          await this.adoptKeptList(p.id, p.baseUrl);
          providers[p.id] = this.lists.has(p.id) ? 'stale' : 'error';
          // The timeout aborts the call, which then reads "request aborted": the operator is told it was the wait.
          const why = signal.aborted ? new Error(`no answer from ${p.id} within ${LIST_TIMEOUT_MS / 1000} s`) : err;
          this.onListFailure(p.id, why, this.lists.has(p.id));
        }
      }),
    );
    const next = new Map<string, RegistryModel>();
    const unread = new Map<string, { model: RegistryModel; providers: string[] }>();
    const unlisted: string[] = [];
    for (const model of this.catalogue.models) {
      const entry = this.toEntry(model);
      if (entry.offers.length > 0 || entry.deprecated) next.set(entry.id, entry);
      else {
        unlisted.push(entry.id);
        if (entry.unread) unread.set(entry.id, { model: entry, providers: entry.unread });
      }
    }
    await this.adoptKeptCreated(next);
    this.models = next;
    this.unread = unread;
    const failing: Record<string, Exclude<ProviderListStatus, 'ok'>> = {};
    for (const [id, status] of Object.entries(providers)) if (status !== 'ok') failing[id] = status;
    this.unreadLists = failing;
    if (changed) for (const listener of this.changedListeners) listener();
    return { models: next.size, providers, unlisted };
  }

  /**
   * Keeps a list read in the store unless the store holds it already; a store that fails or is slow only leaves it
   * unkept for now. The store is read, not this instance's last write trusted: another instance may have kept another
   * list since (one read while the provider had dropped a model it lists again now), which an instance started while
   * the list is down would take up. True when it wrote one that differs from a list the store held.
   */
  private async keepList(provider: string, baseUrl: string, ids: string[] | null): Promise<boolean> {
    const keeper = this.keeper;
    if (keeper === null) return false;
    // The kept value's text around its `at`, as JSON.stringify writes a KeptList: a list the store holds already is
    // told by comparing text, not by parsing megabytes of an aggregator's list and writing it out again.
    const head = `{"baseUrl":${JSON.stringify(baseUrl)},"at":`;
    const tail = `,"models":${JSON.stringify(ids)}}`;
    let changed = false;
    const saved = keeper
      .load(provider)
      .then(async (value) => {
        if (value?.startsWith(head) && value.endsWith(tail) && KEPT_AT.test(value.slice(head.length, -tail.length))) return;
        await keeper.save(provider, `${head}${Date.now()}${tail}`);
        changed = value !== null && readKept(value) !== null;
      })
      .catch(() => {});
    await waitAtMost(saved, CREATED_TIMEOUT_MS);
    return changed;
  }

  /** Takes up the list the store keeps for a provider whose list could not be read, if it is newer than this instance's. */
  private async adoptKeptList(provider: string, baseUrl: string): Promise<void> {
    const keeper = this.keeper;
    if (keeper === null) return;
    const loaded = keeper.load(provider).then(
      (value) => {
        const kept = value === null ? null : readKept(value);
        if (kept === null || kept.baseUrl !== baseUrl || kept.at <= (this.listAt.get(provider) ?? 0)) return;
        this.lists.set(provider, kept.models === null ? null : this.namedIn(provider, kept.models));
        this.listAt.set(provider, kept.at);
      },
      () => {},
    );
    await waitAtMost(loaded, CREATED_TIMEOUT_MS);
  }

  /**
   * Gives each model new to this instance the `created` the store keeps for it, so that clients of several instances,
   * or of one restarted, see one value (OpenAI's never changes). A store that fails or is slow leaves this instance's
   * own time until a later rebuild.
   */
  private async adoptKeptCreated(next: Map<string, RegistryModel>): Promise<void> {
    const keep = this.keepCreated;
    if (keep === null) return;
    const fresh = [...next.values()].filter((m) => !this.createdKept.has(m.id));
    if (fresh.length === 0) return;
    const adopted = keep(new Map(fresh.map((m) => [m.id, m.created]))).then(
      (kept) => {
        for (const m of fresh) {
          const created = kept.get(m.id);
          if (created === undefined) continue;
          this.firstSeen.set(m.id, created);
          this.createdKept.add(m.id);
          m.created = created;
        }
      },
      () => {},
    );
    await waitAtMost(adopted, CREATED_TIMEOUT_MS);
  }

  private toEntry(model: ModelConfig): RegistryModel {
    const regions = new Map(this.catalogue.providers.map((p) => [p.id, p.region]));
    const offers = model.offers
      .filter((o) => {
        const list = this.lists.get(o.provider);
        return list === null || list?.has(o.upstreamModel) === true;
      })
      .map((o) => ({ provider: o.provider, region: regions.get(o.provider) ?? 'eu', upstreamModel: o.upstreamModel, pricing: o.pricing }));
    if (!this.firstSeen.has(model.id)) this.firstSeen.set(model.id, Math.floor(Date.now() / 1000));
    const unread = [...new Set(model.offers.map((o) => o.provider).filter((p) => !this.lists.has(p)))];
    return {
      id: model.id,
      kind: model.kind,
      owned_by: model.owned_by,
      context_window: model.context_window ?? DEFAULT_CONTEXT_WINDOW,
      capabilities: model.capabilities ?? [],
      deprecated: model.deprecated ?? false,
      beta: model.beta ?? false,
      offers,
      created: this.firstSeen.get(model.id) ?? 0,
      ...(unread.length > 0 ? { unread } : {}),
    };
  }
}
