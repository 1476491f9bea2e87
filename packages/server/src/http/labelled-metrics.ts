import type { Registry } from 'prom-client';

type Labels = Record<string, string>;

interface Series<T> {
  labels: Labels;
  state: T;
}

/**
 * A labelled counter or histogram for the request path, read by
 * prom-client's registry like its own. A label set is resolved once to
 * its series; an observation is then a few additions, where prom-client's
 * own children validate and hash their labels on every call (about 1% of
 * a request's CPU under load, for three observations a request).
 */
abstract class LabelledMetric<T> {
  readonly aggregator = 'sum';
  private readonly series = new Map<string, Series<T>>();

  constructor(
    readonly name: string,
    readonly help: string,
    readonly type: 'counter' | 'histogram',
    private readonly labelNames: readonly string[],
    registry: Registry,
  ) {
    registry.registerMetric(this as never);
  }

  protected seriesOf(values: readonly string[]): Series<T> {
    const id = values.join('\u0000');
    let s = this.series.get(id);
    if (!s) {
      const labels: Labels = {};
      this.labelNames.forEach((n, i) => {
        labels[n] = values[i] ?? '';
      });
      s = { labels, state: this.initial() };
      this.series.set(id, s);
    }
    return s;
  }

  protected abstract initial(): T;
  protected abstract values(s: Series<T>): { labels: Labels; value: number; metricName?: string }[];

  /** What prom-client's registry reads at a scrape. */
  get(): { name: string; help: string; type: string; aggregator: string; values: { labels: Labels; value: number; metricName?: string }[] } {
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values: [...this.series.values()].flatMap((s) => this.values(s)) };
  }
}

export class LabelledCounter extends LabelledMetric<{ n: number }> {
  constructor(name: string, help: string, labelNames: readonly string[], registry: Registry) {
    super(name, help, 'counter', labelNames, registry);
  }

  /** The series of these label values, to count on without resolving them again. */
  labels(...values: string[]): { inc(): void } {
    const state = this.seriesOf(values).state;
    return {
      inc: () => {
        state.n++;
      },
    };
  }

  protected initial() {
    return { n: 0 };
  }

  protected values(s: Series<{ n: number }>) {
    return [{ labels: s.labels, value: s.state.n }];
  }
}

interface Buckets {
  /** Observations per bucket (not cumulative); the last one is +Inf. */
  counts: number[];
  sum: number;
  count: number;
}

export class LabelledHistogram extends LabelledMetric<Buckets> {
  constructor(
    name: string,
    help: string,
    labelNames: readonly string[],
    private readonly bounds: readonly number[],
    registry: Registry,
  ) {
    super(name, help, 'histogram', labelNames, registry);
  }

  labels(...values: string[]): { observe(v: number): void } {
    const state = this.seriesOf(values).state;
    const bounds = this.bounds;
    return {
      observe: (v: number) => {
        if (!Number.isFinite(v)) return;
        let i = 0;
        while (i < bounds.length && v > (bounds[i] as number)) i++;
        state.counts[i] = (state.counts[i] as number) + 1;
        state.sum += v;
        state.count++;
      },
    };
  }

  protected initial(): Buckets {
    return { counts: new Array<number>(this.bounds.length + 1).fill(0), sum: 0, count: 0 };
  }

  protected values(s: Series<Buckets>) {
    const out: { labels: Labels; value: number; metricName: string }[] = [];
    let cumulative = 0;
    this.bounds.forEach((le, i) => {
      cumulative += s.state.counts[i] as number;
      out.push({ labels: { le: String(le), ...s.labels }, value: cumulative, metricName: `${this.name}_bucket` });
    });
    out.push({ labels: { le: '+Inf', ...s.labels }, value: s.state.count, metricName: `${this.name}_bucket` });
    out.push({ labels: s.labels, value: s.state.sum, metricName: `${this.name}_sum` });
    out.push({ labels: s.labels, value: s.state.count, metricName: `${this.name}_count` });
    return out;
  }
}
