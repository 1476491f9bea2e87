import { Counter, collectDefaultMetrics, Histogram, Registry } from 'prom-client';

/** Prometheus metrics of one gateway instance (its own registry, so tests can run several). */
export class Metrics {
  readonly registry = new Registry();
  readonly requests = new Counter({
    name: 'gw_http_requests_total',
    help: 'HTTP requests answered, by route, variant and status',
    labelNames: ['route', 'variant', 'status'] as const,
    registers: [this.registry],
  });
  readonly duration = new Histogram({
    name: 'gw_http_request_duration_seconds',
    help: 'Time from request to response, seconds',
    labelNames: ['route'] as const,
    buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [this.registry],
  });
  readonly upstream = new Histogram({
    name: 'gw_upstream_duration_seconds',
    help: 'Upstream call time by provider and outcome, seconds',
    labelNames: ['provider', 'outcome'] as const,
    buckets: [0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [this.registry],
  });
  readonly usagePending = new Counter({
    name: 'gw_usage_write_errors_total',
    help: 'Failed usage batch writes (records are kept and retried)',
    registers: [this.registry],
  });

  constructor() {
    collectDefaultMetrics({ register: this.registry, prefix: 'gw_' });
  }
}
