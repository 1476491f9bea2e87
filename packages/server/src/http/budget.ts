import { H } from '@gw/schema';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { GatewayError } from '../errors/gateway-error.js';
import { warnOnFailure } from '../lib/error-summary.js';
import { type BudgetScope, BudgetsUnavailableError, fromNano, toNano } from '../limits/budget-types.js';
import type { ApiKeyRecord, Workspace } from '../store/types.js';
import { isMultipart } from './multipart-spool.js';
import { applyRateLimit } from './plugins/rate-limit.js';
import { recordClientGone } from './plugins/usage-recording.js';
import type { Services } from './services.js';

/**
 * The budget hold of {@link reserveBudget} and the rate limiter's pending
 * decision, awaited together: with Redis, their two round trips overlap.
 * The limiter's refusal comes first, as if it had been applied alone
 * before; a hold taken meanwhile is released when the 429 is answered
 * (its settle costs nothing). While it lasts, such a hold can only make
 * another request of the same budget see less left, never more.
 */
export async function reserveBudgetWithRateLimit(services: Services, request: FastifyRequest, reply: FastifyReply, worstEur: number): Promise<void> {
  const limiting = applyRateLimit(request, reply);
  if (!limiting) return reserveBudget(services, request, worstEur);
  const holding = reserveBudget(services, request, worstEur);
  // Handled here and awaited below: a budget refusal that lands while the limiter answers is not an unhandled rejection.
  holding.catch(ignore);
  try {
    await limiting;
  } catch (refused) {
    // Once the hold is in place, the usage hook releases it when the 429 is answered.
    await holding.catch(ignore);
    throw refused;
  }
  await holding;
}

function ignore(): void {}

/**
 * An amount as the store keeps it, to its 12th decimal with trailing zeros dropped: six decimals said €0.000000 of a
 * worst case of €0.00000002 that a budget of 0 refuses, and rounded €0.0000047 up to €0.000005.
 */
function eurText(eur: number): string {
  const fixed = eur.toFixed(12).replace(/0+$/, '');
  return `€${fixed.endsWith('.') ? `${fixed}00` : fixed}`;
}

/**
 * Holds the request's worst-case cost against its key's and workspace's
 * budgets before any upstream call; the hold is settled to the real cost
 * (or released) when the response ends (usage-recording plugin).
 */
export async function reserveBudget(services: Services, request: FastifyRequest, worstEur: number): Promise<void> {
  const key = request.gw.key;
  if (!key) return;
  const listed = keyScopes(services, key);
  const scopes = listed instanceof Promise ? await listed : listed;
  if (scopes.length === 0) return;
  const tag = budgetTag(key);
  const res = await services.ledger.reserve(tag, scopes, worstEur, request.id).catch((err: unknown) => {
    if (!(err instanceof BudgetsUnavailableError)) throw err;
    throw new GatewayError('store_unavailable', 'The budget of this key cannot be checked right now (its stores are unreachable); please retry shortly.', {
      retryAfterS: 1,
      cause: err,
    });
  });
  if (!res.ok) {
    const what = scopeHolder(res.scope);
    const worst = eurText(worstEur);
    const held = await heldByRequestsInFlight(services, tag, scopes, res.scope, worstEur);
    if (held !== null) {
      // Not used up: the holds of requests in flight are settled to what they really cost when they end.
      throw new GatewayError(
        'budget_exceeded',
        `Too little of the budget of this ${what} is free while its requests in flight hold their worst cases (this one's is ${worst}); retry shortly.`,
        { retryAfterMs: await roomBackInMs(services, tag, res.scope, held), headers: { [H.shouldRetry]: 'true' } },
      );
    }
    throw new GatewayError(
      'budget_exceeded',
      `The budget of this ${what} is used up, or too little of it is left for this request (its worst case is ${worst}).`,
    );
  }
  request.gw.reservation = res.reservation;
  // The client left while the hold was being taken: its connection's close has passed already, so it is recorded here.
  if (request.raw.socket?.destroyed) recordClientGone(services, request);
}

/**
 * What the request's budget hold bounds a failover by (routing/execute.ts, `cost`): the offer's held cost while a
 * budget holds the request, none without one (no budget: every offer may be tried).
 */
export function heldFor<T>(request: FastifyRequest, cost: (offer: T) => number): ((offer: T) => number) | undefined {
  return request.gw.reservation === null ? undefined : cost;
}

/**
 * Holds `moreEur` more of the request's budget, for a failover after the provider was paid for part of the failed
 * attempt: the admission hold covers one attempt's worst case, and the next offer's answer is billed on top of the
 * parts. The extra hold (grown by a new one on a later failover) is let go when the request is recorded, its cost
 * settled on the admission hold. False when the budget cannot hold it (the request then ends with its failure) or the
 * request was recorded meanwhile (its client left).
 */
export async function growBudgetHold(services: Services, request: FastifyRequest, moreEur: number): Promise<boolean> {
  const held = request.gw.reservation;
  const key = request.gw.key;
  if (held === null || key === null || moreEur <= 0) return true;
  const scopes = await keyScopes(services, key);
  const before = request.gw.failoverHold;
  const eur = (before === null ? 0 : fromNano(before.nano)) + moreEur;
  const grown = await services.ledger.reserve(held.tag, scopes, eur, `${request.id}:failover:${toNano(eur)}`).catch(() => null);
  if (!grown?.ok) return false;
  if (request.gw.reservation !== held) {
    await services.ledger.release(grown.reservation).catch(() => {});
    return false;
  }
  request.gw.failoverHold = grown.reservation;
  if (before !== null) await services.ledger.release(before).catch(warnOnFailure(request.log, 'budget release failed'));
  return true;
}

/**
 * Refuses an upload (multipart) of a key whose budget, or whose workspace's, is used up before its body is read: the
 * hold is worked out from the audio, so without this a client with nothing left sent up to the upload limit for a
 * 402. Only what is spent counts here (holds of requests in flight may settle lower): the hold after the body decides
 * the rest. As for the limiter's refusal at this point, the model is not known yet, so the refusal is not recorded.
 */
export function refuseUploadsOverBudget(scope: FastifyInstance, services: Services): void {
  scope.addHook('preParsing', async (request, _reply, payload) => {
    const key = request.gw.key;
    if (!key || !isMultipart(request.headers['content-type'])) return payload;
    const listed = keyScopes(services, key);
    const scopes = listed instanceof Promise ? await listed : listed;
    const tag = budgetTag(key);
    for (const s of scopes) {
      if (s.limit === null) continue;
      const seen = s.limit <= 0 ? { spent: 0 } : await services.ledger.peek(tag, s.id).catch(() => null);
      if (seen !== null && seen.spent >= s.limit) {
        throw new GatewayError('budget_exceeded', `The budget of this ${scopeHolder(s.id)} is used up; the upload was not read.`);
      }
    }
    return payload;
  });
}

/** The ledger's tag of a key's holds: its workspace's, else its own. */
function budgetTag(key: ApiKeyRecord): string {
  return key.workspaceId ? `ws:${key.workspaceId}` : `key:${key.id}`;
}

/** Whose budget a scope is, as a refusal says it. */
function scopeHolder(scopeId: string): string {
  return scopeId.startsWith('ws:') ? 'workspace' : 'API key';
}

/** The budgets a key's requests are held against: at once when its workspace is cached (no await), else once it is read. */
function keyScopes(services: Services, key: ApiKeyRecord): BudgetScope[] | Promise<BudgetScope[]> {
  const found = key.workspaceId ? services.workspaces.get(key.workspaceId) : null;
  return found instanceof Promise ? found.then((ws) => budgetScopes(services, key, ws)) : budgetScopes(services, key, found);
}

/**
 * Whether the request would fit in what its budget has left once the holds of requests in flight are let go: the
 * EUR of holds that must go for it to fit, else null.
 */
async function heldByRequestsInFlight(services: Services, tag: string, scopes: BudgetScope[], scopeId: string, worstEur: number): Promise<number | null> {
  const scope = scopes.find((s) => s.id === scopeId);
  const seen = await services.ledger.peek(tag, scopeId).catch(() => null);
  if (!scope || scope.limit === null || !seen || seen.reserved <= 0 || seen.spent + worstEur > scope.limit) return null;
  return seen.spent + seen.reserved + worstEur - scope.limit;
}

/**
 * When a refusal that holds cause can find room: when enough of them can be let go at the latest as far as the ledger
 * knows (those of an instance that died, once its word that it is alive lapses: up to 6 s, where a retry after 1 s, and
 * the OpenAI SDK's two, were refused until the SDK gave up), else 1 s, as a hold of a running request may end any time.
 */
async function roomBackInMs(services: Services, tag: string, scopeId: string, heldEur: number): Promise<number> {
  const inMs = await services.ledger.roomBackInMs?.(tag, scopeId, toNano(heldEur)).catch(() => null);
  // A little past the lapse: the retry must find it passed in Redis, not a few ms short of it.
  return inMs === null || inMs === undefined || inMs <= HELD_RETRY_MS ? HELD_RETRY_MS : inMs + LAPSE_MARGIN_MS;
}

const HELD_RETRY_MS = 1_000;
const LAPSE_MARGIN_MS = 100;

/**
 * The budgets a key's requests are held to, built once per cached key
 * record and workspace (both are replaced, not changed, when they are
 * re-read), not for every request.
 */
const scopesOfKey = new WeakMap<ApiKeyRecord, { ws: Workspace | null; scopes: BudgetScope[] }>();

/** What the database's leases hold of a scope: Redis counts it as held when it loads the scope's total. */
function leasedIn(services: Services, scopeId: string): () => Promise<{ nano: number; ms: number }> {
  return () => services.store.budgetLeases.live(scopeId);
}

function budgetScopes(services: Services, key: ApiKeyRecord, ws: Workspace | null): BudgetScope[] {
  const known = scopesOfKey.get(key);
  if (known && known.ws === ws) return known.scopes;
  const scopes: BudgetScope[] = [];
  if (key.budget !== null) scopes.push(keyScope(services, key));
  if (ws && ws.budget !== null) scopes.push(workspaceScope(services, ws));
  scopesOfKey.set(key, { ws, scopes });
  return scopes;
}

function keyScope(services: Services, key: ApiKeyRecord): BudgetScope {
  const id = `key:${key.id}`;
  return {
    id,
    limit: key.budget,
    seq: key.budgetSeq,
    loadSpent: async () => (await services.store.keys.getById(key.id))?.spent ?? 0,
    loadLeased: leasedIn(services, id),
  };
}

function workspaceScope(services: Services, ws: Workspace): BudgetScope {
  const id = `ws:${ws.id}`;
  return {
    id,
    limit: ws.budget,
    seq: ws.budgetSeq,
    loadSpent: async () => (await services.store.workspaces.get(ws.id))?.spent ?? 0,
    loadLeased: leasedIn(services, id),
  };
}

/**
 * A budget was set (PATCH) on a key or workspace, which may have had none: what it spent meanwhile went to the store
 * only (a scope without a budget is not held, so not in the ledger's total), and a total the ledger kept from before
 * lacks it. It is brought up to the store's before the change is announced, and again once every instance has
 * written its usage records.
 */
export async function budgetSet(services: Services, of: { key: ApiKeyRecord } | { workspace: Workspace }): Promise<void> {
  if ('key' in of) {
    if (of.key.budget !== null) await services.ledger.budgetSet?.(budgetTag(of.key), keyScope(services, of.key));
  } else if (of.workspace.budget !== null) {
    await services.ledger.budgetSet?.(`ws:${of.workspace.id}`, workspaceScope(services, of.workspace));
  }
}
