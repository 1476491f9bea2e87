import { readFileSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import { Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { GatewayFileConfig } from '@gw/schema';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyRequest } from 'fastify';
import type { Redis } from 'ioredis';
import { ApiKeyAuthenticator } from './auth/api-keys.js';
import { rootSecret } from './auth/root-secret.js';
import { WorkspaceCache } from './auth/workspace-cache.js';
import { ConfigError, type GatewayConfig } from './config/index.js';
import { entryWarnings } from './config/provider-entry.js';
import { GatewayError } from './errors/gateway-error.js';
import { ANSWER_ROOM_WAIT_MS, BodyMemory, bodyMemoryBytes } from './http/body-memory.js';
import { DRAIN_READ_GRACE_MS } from './http/drain-close.js';
import { sendError } from './http/errors.js';
import { checkBeforeContinue } from './http/expect-continue.js';
import { clientErrorHandler, frameworkErrors, refuseConnect, variantOfUrl } from './http/framework-errors.js';
import { lazyChildLogger, resForLog } from './http/lazy-request-logger.js';
import { Metrics } from './http/metrics.js';
import { scheduleUploadSweep } from './http/multipart-spool.js';
import { allowedMethods, noRouteError } from './http/no-route.js';
import { openApiRoutes, registerOpenApi } from './http/openapi.js';
import { limitPipelining } from './http/pipeline-limit.js';
import { registerRequestContext } from './http/plugins/request-context.js';
import { publicApi } from './http/public-api.js';
import { RawAnswers } from './http/raw-answers.js';
import { adminRoutes } from './http/routes/admin.js';
import { opsRoutes } from './http/routes/ops.js';
import type { Services } from './http/services.js';
import { tokenPricedOffers } from './http/unit-billing.js';
import { UpstreamCalls } from './http/upstream-call.js';
import { scheduleRegistryRebuild } from './jobs/registry-refresh.js';
import { usageOutageLog } from './jobs/usage-outage-log.js';
import { UsageSpill } from './jobs/usage-spill.js';
import { USAGE_FLUSH_MS, UsageWriter } from './jobs/usage-writer.js';
import { InstancePresence } from './kv/instance-presence.js';
import { MemoryBus } from './kv/memory.js';
import { BATCHING_OPTIONS, connectRedis, FAST_FAIL_OPTIONS, lastConnectionError, RedisBus, refusedByAcl, refusedDatabase } from './kv/redis.js';
import type { Bus } from './kv/types.js';
import { sha256Hex } from './lib/crypto.js';
import { freeBytes, lowDiskHint } from './lib/disk-room.js';
import { errorSummary, warnOnFailure } from './lib/error-summary.js';
import { IdleMemoryRelease } from './lib/idle-memory-release.js';
import { newRequestId } from './lib/ids.js';
import { LogOutput } from './lib/log-output.js';
import { hostForLog, redactSecrets, registerSecret, urlForLog } from './lib/redact.js';
import { MemoryBetaQuota } from './limits/beta-quota.js';
import { FallbackLedger } from './limits/fallback-ledger.js';
import { LeaseLedger } from './limits/lease-ledger.js';
import { LEASE_SWEEP_EVERY_MS, scheduleLeaseSweep } from './limits/lease-sweep.js';
import { BUDGET_IDLE_MS, MemoryLedger } from './limits/memory-ledger.js';
import { MemoryWindowLimiter } from './limits/memory-window.js';
import { RedisBetaQuota } from './limits/redis-beta-quota.js';
import { RedisLedger } from './limits/redis-ledger.js';
import { RedisWindowLimiter } from './limits/redis-window.js';
import { shareReholds } from './limits/rehold-sharing.js';
import { DEFAULT_UPSTREAM_TIMEOUT_MS, defaultConnectTimeoutMs } from './providers/http-client.js';
import { createAdapter } from './providers/index.js';
import type { ProviderAdapter } from './providers/types.js';
import { type IdempotencyBackend, IdempotencyService } from './routing/idempotency.js';
import { RedisIdempotencyBackend } from './routing/idempotency-redis.js';
import { SqlIdempotencyBackend } from './routing/idempotency-sql.js';
import { KeptAnswerAllowance } from './routing/kept-answers.js';
import { OfferStats } from './routing/offer-stats.js';
import { OfferStatsSharing } from './routing/offer-stats-sharing.js';
import { ModelRegistry, type RebuildReport } from './routing/registry.js';
import { shareRegistryRebuilds } from './routing/registry-sharing.js';
import { dbClockOf } from './store/db-clock.js';
import { openStore } from './store/open.js';
import { StorePresence } from './store/presence.js';
import type { Store } from './store/types.js';
import { MemoryStreamStore } from './streaming/memory-stream-store.js';
import { RedisStreamStore } from './streaming/redis-stream-store.js';
import { StreamSessions } from './streaming/sessions.js';
import { StreamMemory } from './streaming/stream-memory.js';

export function gatewayVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string };
  return pkg.version;
}

export interface GatewayOptions {
  config: GatewayConfig;
  /** The providers and models to serve: the config file's, or the simulator's demo catalogue. */
  catalogue: GatewayFileConfig;
  /** false silences request logs (tests); default: pino at config.logLevel. */
  logger?: boolean;
  /** When idle memory is handed back (tests shorten it); default IDLE_MEMORY_RELEASE. */
  idleMemoryRelease?: Partial<typeof IDLE_MEMORY_RELEASE>;
  /** How often budget leases that have run out are deleted (tests shorten it); default LEASE_SWEEP_EVERY_MS. */
  leaseSweepMs?: number;
  /** How long a budget total unused stays in the embedded ledger's memory (tests shorten it); default BUDGET_IDLE_MS. */
  budgetIdleMs?: number;
}

export interface Gateway {
  app: FastifyInstance;
  services: Services;
  /** Stops taking work, finishes what is in flight, writes pending usage, closes connections. */
  close(): Promise<void>;
  /** The log's stdout buffer (null without a logger), flushed within a bound at exit. */
  logOutput: LogOutput | null;
}

/**
 * After 30 s with no request, memory grown by 32 MB or more since the last
 * hand-back goes back to the system (docs/decisions.md). Not sooner: the
 * collection also shrinks V8's heap limits, and a burst that follows runs
 * on a cold heap (its time to first token was 20-30% longer after 4 s).
 */
const IDLE_MEMORY_RELEASE = { checkEveryMs: 1_000, idleForMs: 30_000, minGrowthBytes: 32 * 2 ** 20 };

/** How many connections the server still has (it counts them after close() too). */
function openConnections(server: Server): Promise<number> {
  return new Promise((resolve) => server.getConnections((err, count) => resolve(err ? 0 : count)));
}

/**
 * How long before the shutdown deadline the calls still waiting on a provider are answered (503 `shutting_down`,
 * recorded, their holds let go) and the streams still running are ended: enough for those answers and the last usage
 * write before the process exits at the deadline; a quarter of a short timeout.
 */
function answerMarginMs(shutdownTimeoutMs: number): number {
  return Math.min(1_500, Math.floor(shutdownTimeoutMs / 4));
}

const HOUR_MS = 3_600_000;

/** PostgreSQL's SQLSTATE for a permission the role lacks. */
const INSUFFICIENT_PRIVILEGE = '42501';

/**
 * How long an upload folder stays untouched before no request can still own it: twice the longest a transcription
 * can take (its upload within GW_REQUEST_TIMEOUT_MS, then up to six provider attempts, each with its connect timeout
 * and its read timeout for the answer's head and again for its body), and at least six hours, so that instances
 * sharing the folder with other timeouts, or a file server whose clock is behind, still keep each other's uploads.
 */
function staleUploadMs(config: GatewayConfig, catalogue: GatewayFileConfig): number {
  const attempts = catalogue.providers.map((p) => {
    const read = p.timeoutMs ?? DEFAULT_UPSTREAM_TIMEOUT_MS;
    return (p.connectTimeoutMs ?? defaultConnectTimeoutMs(read)) + 2 * read;
  });
  return Math.max(6 * HOUR_MS, 2 * (config.requestTimeoutMs + 6 * Math.max(0, ...attempts)));
}

/** Opens the store and connections the config names and builds the app, without listening. */
export async function createGateway(options: GatewayOptions): Promise<Gateway> {
  const { config, catalogue } = options;
  const cannotOpen = (err: unknown): never => {
    const what = config.databaseUrl
      ? `the database at DATABASE_URL (${withoutPassword(config.databaseUrl)})`
      : `the embedded database in GW_DATA_DIR (${config.dataDir})`;
    const disk = config.databaseUrl ? '' : lowDiskHint(config.dataDir, freeBytes(config.dataDir));
    // Summarised: a failed migration statement's own message is only "Failed query: …", its reason in its cause.
    const { message, code } = errorSummary(err);
    const rights =
      code === INSUFFICIENT_PRIVILEGE
        ? ' The role in DATABASE_URL needs the right to create in that database: the gateway makes its schema and tables at start.'
        : '';
    throw new Error(`cannot open ${what}: ${message}${rights}${disk}`, { cause: err });
  };
  const store = await openStore({ ...(config.databaseUrl ? { databaseUrl: config.databaseUrl } : {}), dataDir: config.dataDir }).catch(cannotOpen);
  // PostgreSQL is first reached here (a pool connects on its first query): a refused connection or login is named too.
  await store.migrate().catch(async (err: unknown) => {
    await store.close().catch(() => {});
    cannotOpen(err);
  });
  // All at once, not one after another: a Redis that takes connections but does not answer holds each one's wait.
  // The resume buffer's batched writes have their own connection, so that they never queue ahead of a request's command;
  // stored answers can be large (a whole stream): the idempotency connection waits longer than the limiter's.
  const [bus, redis, streamRedis, idempotencyRedis]: [Bus, Redis | null, Redis | null, Redis | null] = config.redisUrl
    ? await Promise.all([
        RedisBus.connect(config.redisUrl),
        connectRedis(config.redisUrl),
        connectRedis(config.redisUrl, BATCHING_OPTIONS),
        connectRedis(config.redisUrl, { ...FAST_FAIL_OPTIONS, commandTimeout: 2000 }),
      ])
    : [new MemoryBus(), null, null, null];
  const refused = redis && config.redisUrl ? await refusedDatabase(redis, config.redisUrl) : null;
  if (refused !== null) {
    await Promise.all([bus.close(), store.close()]).catch(() => {});
    for (const client of [redis, streamRedis, idempotencyRedis]) client?.disconnect();
    throw new ConfigError('environment', 'REDIS_URL', `a database this Redis has; it refused the one the path names (${refused})`);
  }
  const limiter = redis ? new RedisWindowLimiter(redis) : new MemoryWindowLimiter();
  // While Redis is away, instances sharing PostgreSQL lease budgets there; one embedded instance needs no more than its own ledger.
  const leases = redis && store.kind === 'postgres' ? new LeaseLedger(store.budgetLeases, { storedBefore: () => usage.storedBefore }) : null;
  // What this instance leaves in Redis (budget holds, stream buffers) names it, so that others can tell when it died.
  const presence = redis ? new InstancePresence(redis) : null;
  // Without Redis, instances sharing PostgreSQL say so there instead: a keyed stream's answer names its instance.
  const storePresence = !redis && store.kind === 'postgres' ? new StorePresence(store.instances) : null;
  await storePresence?.start();
  // Before it has Redis reload totals from the store, the ledger has this instance's own usage records written there.
  // Budgets go through Redis only where instances share them (PostgreSQL): the one embedded instance holds them in its
  // own memory, exact, with Redis or without. Through Redis, each outage switched it to a memory ledger that knew
  // neither the requests Redis had admitted nor what was spent since the last outage, and a budget was overspent.
  const flushUsage = () => usage.flush();
  const redisLedger = redis && presence && store.kind === 'postgres' ? new RedisLedger(redis, presence, flushUsage, USAGE_FLUSH_MS) : null;
  const fallback = redisLedger ? new FallbackLedger(redisLedger, leases, flushUsage, USAGE_FLUSH_MS) : null;
  // A total loaded into Redis while requests ran (it was emptied): every instance holds its running requests again.
  if (redisLedger && fallback) await shareReholds(bus, redisLedger, fallback);
  // When Redis's connection drops, the holds it had for this instance's running requests go into the leases at once.
  if (redis && fallback) redis.on('close', () => fallback.sharedLost());
  // When it is ready again, the costs settled on the leases meanwhile are brought to it at once.
  if (redis && fallback) redis.on('ready', () => fallback.sharedBack());
  const ledger =
    fallback ?? new MemoryLedger(flushUsage, undefined, { storedBefore: () => usage.storedBefore, idleMs: options.budgetIdleMs ?? BUDGET_IDLE_MS });
  const betaQuota = redis ? new RedisBetaQuota(redis) : new MemoryBetaQuota();
  // One bound on the event data all streams keep in this instance's memory: the sessions' logs and the in-memory resume copies.
  const streamMemory = new StreamMemory(config.streamMemoryMb * 1024 * 1024);
  const streams =
    streamRedis && presence ? new RedisStreamStore(streamRedis, config.streamGraceS, presence) : new MemoryStreamStore(config.streamGraceS, streamMemory);
  const sessions = new StreamSessions(streamMemory);
  const offerStats = new OfferStats({ failures: config.circuitFailures, openMs: config.circuitOpenMs, remeasureMs: config.remeasureMs });
  // With Redis, every instance learns what the others see of each offer; without it, each keeps its own.
  const sharing = config.redisUrl ? await OfferStatsSharing.start(bus, offerStats) : null;
  const idempotency = new IdempotencyService(
    idempotencyBackend(idempotencyRedis, store, presence, storePresence),
    { waitMs: config.idempotencyWaitMs, claimTtlMs: config.idempotencyClaimTtlMs },
    storePresence?.id,
  );
  // The operator's own secrets are taken out of every log line and message, as the providers' keys are
  // (connection URLs' passwords are masked where a URL is shown: withoutPassword).
  // GW_SECRET, or the one the first start generated and kept in the store, which every instance sharing it then reads.
  const secret = await rootSecret(store, config.secret);
  for (const s of [config.adminToken, secret]) registerSecret(s ?? undefined);
  const adapters = new Map<string, ProviderAdapter>();
  for (const p of catalogue.providers) {
    registerSecret(p.apiKey);
    adapters.set(p.id, createAdapter(p));
  }
  const metrics = new Metrics();
  const rawAnswers = new RawAnswers(metrics);
  const logOutput = (options.logger ?? true) ? new LogOutput(config.logBufferKb * 1024) : null;
  const app = buildFastify(config, logOutput, rawAnswers);
  logOutput?.reportTo((count, since) =>
    app.log.warn(
      { droppedLogLines: count, since: new Date(since).toISOString() },
      `stdout took no log lines for a while: ${count} lines dropped past the ${config.logBufferKb} KiB buffer (GW_LOG_BUFFER_KB)`,
    ),
  );
  if (!config.redisUrl && store.kind === 'pglite') {
    // The embedded store is this process's alone (GW_DATA_DIR is locked): a pending idempotency claim in it is of a run
    // killed mid-request, whose request died unanswered and unbilled. A retry of its key runs now, rather than get 409
    // until the claim would have expired.
    const dropped = await store.idempotency.dropPending();
    if (dropped > 0) app.log.info(`${dropped} idempotency keys of requests cut short by the last run's end are free again`);
  }
  if (store.created === 'template') app.log.info(`embedded database created in ${config.dataDir} from the build's template`);
  if (store.created === 'initdb') {
    app.log.warn(
      `embedded database created in ${config.dataDir} by PGlite's initdb, which takes about 1 GB of memory for a moment: the build's template (packages/server/dist/pglite-template.tar.gz, made by npm run build) is missing or of another PGlite version`,
    );
  }
  rawAnswers.logTo(app.log);
  store.logTo?.(app.log);
  const registry = new ModelRegistry(
    catalogue,
    adapters,
    (provider, err, kept) =>
      app.log.warn(
        { provider },
        `model list of ${provider} could not be fetched: ${redactSecrets(err instanceof Error ? err.message : String(err))}; ${kept ? 'its last list is kept' : 'its models are unavailable until it answers'}`,
      ),
    async (seenAt) => {
      const stored = await store.settings.setManyIfAbsent([...seenAt].map(([id, at]) => [`model_created:${id}`, String(at)]));
      const kept = new Map<string, number>();
      for (const id of seenAt.keys()) {
        const value = stored.get(`model_created:${id}`);
        if (value !== undefined) kept.set(id, Number(value));
      }
      return kept;
    },
    {
      load: (provider) => store.settings.get(`provider_models:${provider}`),
      save: (provider, value) => store.settings.set(`provider_models:${provider}`, value),
    },
  );
  // A rerank or audio offer priced as INTERFACES.md shows (tokens only) is billed by its token prices: the operator is told how.
  for (const o of tokenPricedOffers(catalogue)) app.log.warn({ model: o.model, provider: o.provider }, o.message);
  // A provider entry most likely wrong (a base URL without /v1, with Cohere's /v2 in it) is told now, not as its outage.
  for (const w of entryWarnings(catalogue)) app.log.warn({ provider: w.provider }, w.message);
  // Shared before the first rebuild: a start that reads a list other than the one the store keeps tells the others.
  const rebuildRegistry = await shareRegistryRebuilds(
    bus,
    registry,
    warnOnFailure(app.log, 'registry rebuild shared between the instances (over Redis) failed'),
  );
  const firstRebuild = await registry.rebuild();
  // A configured model no provider lists answers as an unknown one: the operator is told which, once each time it changes.
  let unlisted = '';
  const tellUnlisted = (report: RebuildReport) => {
    const now = report.unlisted.join(', ');
    if (now !== '' && now !== unlisted) {
      app.log.warn({ models: report.unlisted }, `configured models left out, since no provider lists any of their offers: ${now}`);
    }
    unlisted = now;
  };
  tellUnlisted(firstRebuild);
  registry.onRebuilt(tellUnlisted);
  const auth = new ApiKeyAuthenticator(store, bus, config.keyCacheTtlMs);
  await auth.start();
  limitPipelining(app.server, rawAnswers);
  checkBeforeContinue(app.server, auth, limiter, config, rawAnswers);
  app.server.on('connect', (req: IncomingMessage, socket: Socket) => refuseConnect(req, socket, rawAnswers, (path) => allowedMethods(app, path)));
  const redisHealth = redis ? watchRedis(redis, app.log, metrics) : null;
  // One directory per database, so that two gateways sharing GW_DATA_DIR with different databases never store each other's records.
  const spill = await openUsageSpill(join(config.dataDir, 'usage-spill', config.databaseUrl ? databaseTag(config.databaseUrl) : 'embedded'), app.log);
  const outageLog = usageOutageLog(app.log, spill?.dir);
  const usage = new UsageWriter(store, {
    flushIntervalMs: USAGE_FLUSH_MS,
    // Embedded PGlite runs on its own thread: a chunk of 500 rows takes it about 15 ms, off the event loop.
    maxBatch: config.databaseUrl ? 1000 : 500,
    // Costs now in `spent` leave the budget leases at once: until then they count twice against the room left.
    onStored: () => void leases?.tend(),
    onError: (err) => {
      metrics.usagePending.inc();
      outageLog.onError(err);
    },
    onRecovered: outageLog.onRecovered,
    ...(spill ? { spill } : {}),
    onSpill: outageLog.onSpill,
  });
  usage.start();
  const dbClock = dbClockOf(store);
  await dbClock.start();
  const workspaces = new WorkspaceCache(store, config.keyCacheTtlMs, bus);
  auth.onWorkspaceChanged = (id) => workspaces.forget(id);
  bus.onResubscribe(() => workspaces.forgetAll());
  const services: Services = {
    config,
    version: gatewayVersion(),
    secret,
    store,
    registry,
    rebuildRegistry,
    adapters,
    auth,
    workspaces,
    usage,
    dbClock,
    limiter,
    ledger,
    betaQuota,
    streams,
    sessions,
    metrics,
    offerStats,
    idempotency,
    keptAnswers: new KeptAnswerAllowance(config.idempotencyKeptMb * 2 ** 20),
    storePresence,
    lifecycle: { draining: false, inFlight: 0, claimsHeld: 0, apiRequests: 0 },
    bodyMemory: new BodyMemory(bodyMemoryBytes(config.bodyMemoryMb), Math.min(ANSWER_ROOM_WAIT_MS, config.sendTimeoutMs)),
    upstreamCalls: new UpstreamCalls(),
    redisHealth,
  };
  metrics.watch({
    requestsInFlight: () => services.lifecycle.inFlight,
    streamsOpen: () => sessions.size,
    streamMemoryBytes: () => streamMemory.bytes,
    streamReclaims: () => streamMemory.reclaimed,
    usagePending: () => usage.pending,
    usageSpilled: () => {
      const oldest = spill?.oldestAt ?? null;
      return { segments: spill?.waiting ?? 0, oldestAgeS: oldest === null ? 0 : Math.max(0, (dbClock.nowMs() - oldest) / 1000) };
    },
    logLinesDropped: () => logOutput?.dropped ?? 0,
  });
  const memoryRelease = new IdleMemoryRelease({
    ...IDLE_MEMORY_RELEASE,
    ...options.idleMemoryRelease,
    traffic: () => ({ started: services.lifecycle.apiRequests, inFlight: services.lifecycle.inFlight }),
    onRelease: (from, to, ms) => {
      metrics.memoryReleases.inc();
      app.log.info(`idle: handed memory back to the system, resident ${(from / 2 ** 20).toFixed(0)} -> ${(to / 2 ** 20).toFixed(0)} MB (${ms.toFixed(0)} ms)`);
    },
  });
  memoryRelease.start();
  const uploadRoot = config.uploadDir ?? tmpdir();
  const stopUploadSweep = scheduleUploadSweep(uploadRoot, staleUploadMs(config, catalogue), HOUR_MS, (n) =>
    app.log.info(`removed ${n} upload folders left in ${uploadRoot} by a request that can no longer be running (an instance killed mid-upload)`),
  );
  const stopLeaseSweep = leases
    ? scheduleLeaseSweep(
        store.budgetLeases,
        options.leaseSweepMs ?? LEASE_SWEEP_EVERY_MS,
        (n) => app.log.debug(`deleted ${n} budget leases that had run out`),
        (err) => app.log.debug({ err: errorSummary(err) }, 'budget lease sweep failed; tried again at the next'),
      )
    : () => {};
  const stopRebuild = scheduleRegistryRebuild(registry, config.registryIntervalS, warnOnFailure(app.log, 'registry rebuild failed'), firstRebuild);
  await mountRoutes(app, services);
  return {
    app,
    services,
    logOutput,
    close: async () => {
      services.lifecycle.draining = true;
      redisHealth?.stop();
      stopRebuild();
      stopUploadSweep();
      stopLeaseSweep();
      memoryRelease.stop();
      leases?.stop();
      ledger.stop();
      const deadline = Date.now() + config.shutdownTimeoutMs;
      const margin = answerMarginMs(config.shutdownTimeoutMs);
      const answerBy = deadline - margin;
      // A provider that keeps a request waiting past this would otherwise have it reset by the exit, unanswered and unrecorded.
      const cutTimer = setTimeout(() => {
        const message =
          'This gateway instance is shutting down and could not wait longer for the provider; send the request again (another instance answers it).';
        services.upstreamCalls.cut(new GatewayError('shutting_down', message, { retryAfterS: 1 }));
        // And a stream that began after sessions.drain below returned (its request was still waiting on the provider).
        sessions.abortAll();
        // A resume of a stream relayed elsewhere would otherwise be cut by the exit without a word.
        streams.endFollowers();
      }, answerBy - Date.now());
      // New connections are refused from now on, but the kept-alive ones stay open for the grace (http.Server's own
      // close would close the idle ones at once); every request on them is answered 503 (request-context).
      if (app.server.listening) Server.prototype.close.call(app.server);
      await new Promise((r) => setTimeout(r, Math.min(DRAIN_READ_GRACE_MS, config.shutdownTimeoutMs)));
      // Once no request is in flight, every connection left (idle, or opened and never used) is closed.
      const closing = app.close();
      await sessions.drain(Math.max(0, answerBy - Date.now()));
      // Half the margin is kept for writing the usage: a request still running then is cut, not the records of the others.
      const stopWaitingAt = deadline - Math.floor(margin / 2);
      // A keyed request whose client left runs on, its claim held, until its answer is stored for the retry.
      const inFlightDone = async () => {
        const { lifecycle } = services;
        while ((lifecycle.inFlight > 0 || lifecycle.claimsHeld > 0) && Date.now() < stopWaitingAt) await new Promise((r) => setTimeout(r, 20));
      };
      await inFlightDone();
      // Such a request's stream, begun during the drain with nobody reading it: billed when it ends, as the others.
      await sessions.drain(Math.max(0, answerBy - Date.now()));
      // A connection still open now had a stream end during the drain, its head sent with keep-alive before it began:
      // its client may be sending its next request on it. Read it for the grace too, to answer 503 rather than reset it.
      if ((await openConnections(app.server)) > 0) {
        await new Promise((r) => setTimeout(r, Math.max(0, Math.min(DRAIN_READ_GRACE_MS, stopWaitingAt - Date.now()))));
        await inFlightDone();
      }
      clearTimeout(cutTimer);
      app.server.closeAllConnections();
      await closing;
      app.log.info('http closed; writing pending usage');
      // Retried until just before the deadline (the database may be coming back); what is left then is lost, and said so.
      let unwritten: unknown = null;
      await usage.stop(Math.max(Date.now() + 1_000, deadline - 250)).catch((err: unknown) => {
        unwritten = err;
        app.log.error({ unwrittenUsageRecords: usage.pending }, (err as Error).message);
      });
      await Promise.all([...adapters.values()].map((a) => a.close()));
      await streams.close();
      await presence?.close();
      await storePresence?.close();
      sharing?.close();
      await idempotency.close();
      await bus.close();
      redis?.disconnect();
      streamRedis?.disconnect();
      limiter.close();
      betaQuota.close();
      dbClock.stop();
      await closeStore(store);
      if (unwritten) throw unwritten;
      app.log.info('stopped');
    },
  };
}

/** Idempotency keys live in Redis when there is one, else in the store. */
function idempotencyBackend(redis: Redis | null, store: Store, presence: InstancePresence | null, storePresence: StorePresence | null): IdempotencyBackend {
  if (!redis) return new SqlIdempotencyBackend(store.idempotency, storePresence);
  const backend = new RedisIdempotencyBackend(redis, presence?.id ?? '');
  // A FLUSHALL under open connections fires no reconnect: the claims and answers this instance holds are written again.
  presence?.onDataLost(() => backend.dataLost());
  return backend;
}

async function closeStore(store: Store): Promise<void> {
  try {
    await store.close();
  } catch {
    // Already gone.
  }
}

function buildFastify(config: GatewayConfig, logger: LogOutput | null, rawAnswers: RawAnswers): FastifyInstance {
  return Fastify({
    logger: logger
      ? {
          level: config.logLevel,
          stream: logger.stream,
          redact: {
            paths: ['req.headers.authorization', 'req.headers["api-key"]', 'req.headers["x-api-key"]', '*.apiKey', '*.key', '*.password'],
            censor: '[redacted]',
          },
          serializers: {
            // Fastify's own fields, with anything shaped like a key taken out of the URL (a client may put one in a query).
            req: (req: FastifyRequest) => ({
              method: req.method,
              url: urlForLog(req.url),
              host: hostForLog(req.host),
              remoteAddress: req.ip,
              remotePort: req.socket?.remotePort,
            }),
            res: resForLog,
          },
        }
      : false,
    ...(logger ? { childLoggerFactory: lazyChildLogger } : {}),
    bodyLimit: config.bodyLimitBytes,
    // A client trickling its request (a slow body after valid headers) cannot hold a connection for ever.
    // Node's server reads this deadline when it is made (Fastify sets it on the server after, which Node's check ignores),
    // and checks it (and the headers') on connectionsCheckingInterval, 30 s by default: the bound holds within 5 s.
    requestTimeout: config.requestTimeoutMs,
    // A request without Host is refused in the envelope (request-context.ts), not with Node's bare 400.
    http: { requestTimeout: config.requestTimeoutMs, connectionsCheckingInterval: 5000, requireHostHeader: false },
    // Above the idle timeout of the balancer in front (README), so that it never sends a request on a connection closing here.
    keepAliveTimeout: config.keepAliveTimeoutMs,
    // The log's remoteAddress behind a proxy: the client's, from X-Forwarded-For, read only when a line is written.
    ...(config.trustProxy === null ? {} : { trustProxy: trustedProxies(config.trustProxy) }),
    // Model ids travel in paths (GET /alt/v1/models/{id}): a long one is a 404 model_not_found, not a framework 414.
    routerOptions: { maxParamLength: 1000 },
    frameworkErrors: frameworkErrors(rawAnswers),
    clientErrorHandler: clientErrorHandler(rawAnswers),
    genReqId: () => newRequestId(),
    requestIdHeader: false,
    // Our own 503 while draining (request-context.ts), in the variant's envelope with Retry-After, not Fastify's bare one.
    return503OnClosing: false,
    forceCloseConnections: 'idle',
    // Inputs are validated, never coerced or rewritten (a string "0.5" is not a temperature).
    ajv: { customOptions: { coerceTypes: false, useDefaults: false, removeAdditional: false, allErrors: false } },
  });
}

/** GW_TRUST_PROXY as Fastify takes it: a hop count as the function Fastify makes of one (its types take no number). */
function trustedProxies(trust: number | readonly string[]): string[] | ((address: string, hop: number) => boolean) {
  return typeof trust === 'number' ? (_address, hop) => hop < trust : [...trust];
}

async function mountRoutes(app: FastifyInstance, services: Services): Promise<void> {
  // JSON only: Fastify would also parse text/plain, whose string then failed the schema with a 400 instead of a 415.
  app.removeContentTypeParser('text/plain');
  await registerOpenApi(app, services.version);
  registerRequestContext(app, services);
  app.setErrorHandler((err, request, reply) => sendError(err, request, reply, variantOfUrl(request.url)));
  app.setNotFoundHandler((request, reply) => sendError(noRouteError(app, request, reply), request, reply, variantOfUrl(request.url)));
  opsRoutes(app, services);
  openApiRoutes(app);
  await app.register(publicApi, { prefix: '/v1', services, variant: 'a' });
  await app.register(publicApi, { prefix: '/alt/v1', services, variant: 'b' });
  await app.register(publicApi, { prefix: '/v2', services, variant: 'a', cohereV2: true });
  await app.register(publicApi, { prefix: '/alt/v2', services, variant: 'b', cohereV2: true });
  const adminToken = services.config.adminToken;
  if (adminToken) await app.register((admin) => adminRoutes(admin, { ...services, adminToken }), { prefix: '/admin/v1' });
}

/**
 * Says when Redis goes away and when it is back, once each, in the log, in
 * `gw_redis_up` and in /readyz: while it is
 * away the limiter fails open, budgets are held without it (leased in
 * PostgreSQL, or in memory), and a revocation reaches other instances only
 * through their key cache's expiry.
 */
function watchRedis(redis: Redis, log: FastifyBaseLogger, metrics: Metrics): { reachable: boolean; answers(): Promise<boolean>; stop(): void } {
  let stopped = false;
  // stop(): the gateway is closing its own connections, which is not Redis going away.
  const health = {
    reachable: redis.status === 'ready',
    // A stalled Redis keeps its connection open: `reachable` learns of it only when the connection drops, seconds
    // later on an idle gateway. Readiness asks it (within the connection's command timeout, 500 ms).
    answers: () => redis.ping().then(() => true, refusedByAcl),
    stop: () => {
      stopped = true;
    },
  };
  const gauge = metrics.redisUp();
  gauge.set(health.reachable ? 1 : 0);
  let lost = false;
  redis.on('close', () => {
    health.reachable = false;
    gauge.set(0);
    if (lost || stopped) return;
    lost = true;
    // Why it went (a refused password: WRONGPASS, NOAUTH), where "unreachable" alone sent the operator to the network.
    const err = lastConnectionError(redis);
    log.warn(
      err === undefined ? {} : { err: errorSummary(err) },
      'redis unreachable: the rate limiter fails open and budgets are held without it until it is back; key and workspace changes (revocations included) reach this instance within about 250 ms, as it reads them from the store again',
    );
  });
  redis.on('ready', () => {
    health.reachable = true;
    gauge.set(1);
    if (!lost) return;
    lost = false;
    log.info('redis reachable again');
  });
  return health;
}

/** The usage spill directory, with what earlier runs left in it; null (records wait in memory) if it cannot be used. */
async function openUsageSpill(dir: string, log: FastifyBaseLogger): Promise<UsageSpill | null> {
  const spill = new UsageSpill(dir);
  try {
    await spill.load();
  } catch (err) {
    log.warn({ err: errorSummary(err) }, `usage spill directory ${dir} cannot be used; during a database outage usage records wait in memory`);
    return null;
  }
  if (spill.waiting > 0) log.warn(`usage: ${spill.waiting} spill segments left in ${dir} by an earlier run; they are stored as the database takes them`);
  return spill;
}

/** A database's name on disk: its host, port and database, hashed (the URL's password stays out of file names). */
function databaseTag(databaseUrl: string): string {
  let where = databaseUrl;
  try {
    const u = new URL(databaseUrl);
    where = `${u.hostname}:${u.port}${u.pathname}`;
  } catch {
    // Not a URL (a connection string pg understands otherwise): hashed whole.
  }
  return `pg-${sha256Hex(where).slice(0, 16)}`;
}

/** A connection URL fit for a message: its password replaced, and any query parameter that could hold one (`?password=`, `sslpassword`…). */
export function withoutPassword(databaseUrl: string): string {
  try {
    const u = new URL(databaseUrl);
    if (u.password) u.password = '***';
    for (const name of [...u.searchParams.keys()]) if (/pass|secret|token|key/i.test(name)) u.searchParams.set(name, '***');
    return u.toString();
  } catch {
    return 'unparsable URL';
  }
}
