import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { LabelledCounter, LabelledHistogram } from '../src/http/labelled-metrics.js';

describe('labelled metrics, as Prometheus reads them', () => {
  it('a histogram exposes cumulative buckets, +Inf, sum and count per label set', async () => {
    const registry = new Registry();
    const h = new LabelledHistogram('t_seconds', 'Test times', ['route'], [0.01, 0.1, 1], registry);
    const a = h.labels('/a');
    for (const v of [0.005, 0.01, 0.05, 0.5, 2]) a.observe(v);
    h.labels('/b"q').observe(0.2);
    a.observe(Number.NaN);
    const text = await registry.metrics();
    expect(text).toContain('# TYPE t_seconds histogram');
    const lines = text.split('\n').filter((l) => l.startsWith('t_seconds'));
    expect(lines).toEqual([
      't_seconds_bucket{le="0.01",route="/a"} 2',
      't_seconds_bucket{le="0.1",route="/a"} 3',
      't_seconds_bucket{le="1",route="/a"} 4',
      't_seconds_bucket{le="+Inf",route="/a"} 5',
      't_seconds_sum{route="/a"} 2.565',
      't_seconds_count{route="/a"} 5',
      't_seconds_bucket{le="0.01",route="/b\\"q"} 0',
      't_seconds_bucket{le="0.1",route="/b\\"q"} 0',
      't_seconds_bucket{le="1",route="/b\\"q"} 1',
      't_seconds_bucket{le="+Inf",route="/b\\"q"} 1',
      't_seconds_sum{route="/b\\"q"} 0.2',
      't_seconds_count{route="/b\\"q"} 1',
    ]);
  });

  it('a counter counts per label set, and the same labels resolve to the same series', async () => {
    const registry = new Registry();
    const c = new LabelledCounter('t_total', 'Test count', ['route', 'status'], registry);
    c.labels('/a', '200').inc();
    c.labels('/a', '200').inc();
    c.labels('/a', '500').inc();
    const text = await registry.metrics();
    expect(text).toContain('# TYPE t_total counter');
    expect(text).toContain('t_total{route="/a",status="200"} 2');
    expect(text).toContain('t_total{route="/a",status="500"} 1');
  });
});
