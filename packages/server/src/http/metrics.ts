import { Counter, collectDefaultMetrics, Gauge, Registry } from 'prom-client';
import { LabelledCounter, LabelledHistogram } from './labelled-metrics.js';

/** Readings of the instance's state for {@link Metrics.watch}. */
export interface InstanceGauges {
  requestsInFlight: () => number;
  streamsOpen: () => number;
  streamMemoryBytes: () => number;
  streamReclaims: () => { copies: number; streams: number };
  usagePending: () => number;
  /** Segments of usage records on disk waiting for the database, and the age in seconds of the oldest record there (0: none). */
  usageSpilled: () => { segments: number; oldestAgeS: number };
  /** Log lines dropped because stdout took none while its buffer was full (GW_LOG_BUFFER_KB). */
  logLinesDropped: () => number;
}

/** Prometheus metrics of one gateway instance (its own registry, so tests can run several). */
export class Metrics {
  readonly registry = new Registry();
  readonly requests = new LabelledCounter(
    'gw_http_requests_total',
    'HTTP requests answered, by route, variant and status',
    ['route', 'variant', 'status'],
    this.registry,
  );
  readonly duration = new LabelledHistogram(
    'gw_http_request_duration_seconds',
    'Time from request to response, seconds',
    ['route'],
    [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    this.registry,
  );
  readonly upstream = new LabelledHistogram(
    'gw_upstream_duration_seconds',
    'Upstream call time by provider and outcome, seconds',
    ['provider', 'outcome'],
    [0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    this.registry,
  );
  readonly usagePending = new Counter({
    name: 'gw_usage_write_errors_total',
    help: 'Failed usage batch writes (records are kept and retried)',
    registers: [this.registry],
  });
  readonly memoryReleases = new Counter({
    name: 'gw_idle_memory_releases_total',
    help: 'Times the idle gateway handed its pooled memory back to the system',
    registers: [this.registry],
  });

  /** Registered only where Redis is configured: 1 while it answers, 0 while limits fail open and budgets are held without it. */
  redisUp(): Gauge {
    this.redisGauge ??= new Gauge({
      name: 'gw_redis_up',
      help: 'Whether Redis answers (0: the rate limiter fails open, budgets are held in PostgreSQL or memory)',
      registers: [this.registry],
    });
    return this.redisGauge;
  }
  private redisGauge: Gauge | null = null;

  /** What the instance holds now, each read when /metrics is scraped (nothing on a request's path). */
  watch(read: InstanceGauges): void {
    const gauge = (name: string, help: string, value: () => number) =>
      new Gauge({
        name,
        help,
        registers: [this.registry],
        collect() {
          this.set(value());
        },
      });
    gauge('gw_requests_in_flight', 'Requests whose response has not closed yet', read.requestsInFlight);
    gauge('gw_streams_open', 'Streams this instance is relaying (their upstream still read)', read.streamsOpen);
    gauge(
      'gw_stream_memory_bytes',
      'Event data all streams keep in memory, counted against GW_STREAM_MEMORY_MB (as characters: bytes for ASCII JSON)',
      read.streamMemoryBytes,
    );
    new Counter({
      name: 'gw_stream_memory_reclaims_total',
      help: 'To keep the stream memory bound: resume copies dropped (what="copy") and streams ended (what="stream")',
      labelNames: ['what'],
      registers: [this.registry],
      collect() {
        // The bound keeps the counts; a scrape shows them as they are.
        const { copies, streams } = read.streamReclaims();
        this.reset();
        this.inc({ what: 'copy' }, copies);
        this.inc({ what: 'stream' }, streams);
      },
    });
    new Counter({
      name: 'gw_log_lines_dropped_total',
      help: 'Log lines dropped because stdout took none while the log buffer was full (GW_LOG_BUFFER_KB)',
      registers: [this.registry],
      collect() {
        this.reset();
        this.inc(read.logLinesDropped());
      },
    });
    gauge('gw_usage_records_pending', 'Usage records not yet handed to the database (written every 500 ms)', read.usagePending);
    // During a database outage records wait on disk, not in memory: these show the backlog an operator alerts on.
    gauge(
      'gw_usage_spill_segments',
      'Segments of usage records on disk waiting for the database (GW_DATA_DIR/usage-spill)',
      () => read.usageSpilled().segments,
    );
    gauge(
      'gw_usage_spill_oldest_seconds',
      'Age of the oldest usage record on disk waiting for the database; 0 when none waits',
      () => read.usageSpilled().oldestAgeS,
    );
  }

  // Label sets seen so far, resolved once to their series.
  private readonly requestChildren = new Map<string, { count: { inc(): void }; time: { observe(v: number): void } }>();
  private readonly upstreamChildren = new Map<string, { observe(v: number): void }>();

  constructor() {
    collectDefaultMetrics({ register: this.registry, prefix: 'gw_' });
  }

  /** One answered request: its count by route, variant and status, and its duration by route. */
  observeRequest(route: string, variant: string, status: number, seconds: number): void {
    const key = `${route} ${variant} ${status}`;
    let child = this.requestChildren.get(key);
    if (!child) {
      child = { count: this.requests.labels(route, variant, String(status)), time: this.duration.labels(route) };
      this.requestChildren.set(key, child);
    }
    child.count.inc();
    child.time.observe(seconds);
  }

  /** One upstream call's time by provider and outcome. */
  observeUpstream(provider: string, outcome: string, seconds: number): void {
    const key = `${provider} ${outcome}`;
    let child = this.upstreamChildren.get(key);
    if (!child) {
      child = this.upstream.labels(provider, outcome);
      this.upstreamChildren.set(key, child);
    }
    child.observe(seconds);
  }
}
