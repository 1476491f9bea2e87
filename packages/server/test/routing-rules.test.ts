import { describe, expect, it } from 'vitest';
import { GatewayError } from '../src/errors/gateway-error.js';
import { CIRCUIT_WINDOW_MS, CircuitBook, MAX_PROVIDER_WAIT_MS } from '../src/routing/health.js';
import { EXPLORE_EVERY, LATENCY_ALPHA } from '../src/routing/latency.js';
import { OfferStats } from '../src/routing/offer-stats.js';
import { heldOffers, planOffers, type RouteOptions } from '../src/routing/plan.js';
import type { Offer, RegistryModel } from '../src/routing/registry.js';

const offer = (provider: string, prompt: number, completion: number): Offer => ({
  provider,
  region: 'eu',
  upstreamModel: `${provider}-model`,
  pricing: { prompt_per_1m: prompt, completion_per_1m: completion, currency: 'EUR' },
});
const A = offer('a', 0.8, 0.95);
const B = offer('b', 0.67, 0.67);
const C = offer('c', 0.6, 1.2);
const model: RegistryModel = {
  id: 'x/y',
  kind: 'chat',
  owned_by: 'x',
  context_window: 32_000,
  capabilities: [],
  deprecated: false,
  beta: false,
  offers: [A, B, C],
  created: 0,
};
const size = { promptTokens: 100, maxTokens: 100 };

function clockStats(remeasureMs = 1000) {
  const clock = { now: 1_000_000 };
  const stats = new OfferStats({ failures: 3, openMs: 500, remeasureMs }, () => clock.now);
  return { clock, stats };
}
const opts = (o: Partial<RouteOptions>, stats?: OfferStats): RouteOptions => ({ strategy: 'default', pin: null, prefer: null, maxHops: 5, stats, ...o });
const providers = (plan: Offer[]) => plan.map((o) => o.provider);

describe('circuits', () => {
  it('open after 3 failures in a row, skip the offer for openMs, then let one probe through', () => {
    let now = 0;
    const at = (ms: number) => {
      now += ms;
      return now;
    };
    const book = new CircuitBook({ failures: 3, openMs: 500 });
    book.failure('k', at(10));
    book.failure('k', at(10));
    expect(book.state('k', now)).toBe('closed');
    book.failure('k', at(10));
    expect(book.state('k', now)).toBe('open');
    expect(book.available('k', now)).toBe(false);
    expect(book.remainingMs('k', now)).toBe(500);
    now += 500;
    expect(book.state('k', now)).toBe('half_open');
    expect(book.available('k', now)).toBe(true);
    book.started('k', now);
    // One probe at a time.
    expect(book.available('k', now)).toBe(false);
    book.failure('k', at(5));
    expect(book.state('k', now)).toBe('open');
    now += 500;
    book.started('k', now);
    book.success('k', now);
    expect(book.state('k', now)).toBe('closed');
  });

  it('a success between failures, or a gap longer than the window, starts the count again', () => {
    let now = 0;
    const at = (ms: number) => {
      now += ms;
      return now;
    };
    const book = new CircuitBook({ failures: 3, openMs: 500 });
    book.failure('k', at(1));
    book.failure('k', at(1));
    book.success('k', now);
    book.failure('k', at(1));
    book.failure('k', at(1));
    expect(book.state('k', now)).toBe('closed');
    book.failure('k', at(CIRCUIT_WINDOW_MS + 1));
    book.failure('k', at(1));
    expect(book.state('k', now)).toBe('closed');
    book.failure('k', at(1));
    expect(book.state('k', now)).toBe('open');
  });

  it("a provider's wait opens the circuit at once, capped; answers to attempts begun before do not close it; then one probe", () => {
    const book = new CircuitBook({ failures: 3, openMs: 500 });
    book.failure('k', 0, 2_000);
    expect([book.state('k', 0), book.remainingMs('k', 0)]).toEqual(['open', 2_000]);
    book.success('k', 1_000);
    expect(book.state('k', 1_000)).toBe('open');
    expect(book.available('k', 2_000)).toBe(true);
    book.started('k', 2_000);
    book.success('k', 2_000);
    expect(book.state('k', 2_000)).toBe('closed');
    book.failure('k', 0, 86_400_000);
    expect(book.remainingMs('k', 0)).toBe(MAX_PROVIDER_WAIT_MS);
  });

  it("a provider's wait on the failure that reaches the count keeps the circuit open for that wait, not the open period", () => {
    const book = new CircuitBook({ failures: 2, openMs: 30_000 });
    book.failure('k', 0);
    book.failure('k', 10, 2_000);
    expect([book.state('k', 10), book.remainingMs('k', 10)]).toEqual(['open', 2_000]);
    expect(book.available('k', 2_010)).toBe(true);
    // Without a wait, the count opens it for the period.
    book.failure('j', 0);
    book.failure('j', 10);
    expect(book.remainingMs('j', 10)).toBe(30_000);
  });

  it('a probe whose client left frees the slot without a verdict', () => {
    const book = new CircuitBook({ failures: 1, openMs: 100 });
    book.failure('k', 0);
    const probe = book.started('k', 100);
    expect(book.available('k', 100)).toBe(false);
    book.abandoned('k', probe);
    expect(book.available('k', 100)).toBe(true);
  });

  it('an attempt that is not the probe (begun before the circuit opened) leaves the probe its slot when its client leaves', () => {
    const book = new CircuitBook({ failures: 1, openMs: 100 });
    const before = book.started('k', 0);
    book.failure('k', 0);
    const probe = book.started('k', 100);
    expect([before, probe > 0]).toEqual([0, true]);
    book.abandoned('k', before);
    expect(book.available('k', 100)).toBe(false);
    book.abandoned('k', probe);
    expect(book.available('k', 100)).toBe(true);
  });
});

describe('plans', () => {
  it('default keeps the configured order and leaves out offers whose circuit is open', () => {
    const { stats } = clockStats();
    expect(providers(planOffers(model, opts({}, stats), size))).toEqual(['a', 'b', 'c']);
    for (let i = 0; i < 3; i++) stats.record(A, 'error', 5, 'full');
    expect(providers(planOffers(model, opts({}, stats), size))).toEqual(['b', 'c']);
  });

  it('cheapest weighs prompt and completion prices by the prompt size and max_tokens', () => {
    expect(providers(planOffers(model, opts({ strategy: 'cheapest' }), { promptTokens: 10_000, maxTokens: 10 }))).toEqual(['c', 'b', 'a']);
    expect(providers(planOffers(model, opts({ strategy: 'cheapest' }), { promptTokens: 10, maxTokens: 10_000 }))).toEqual(['b', 'a', 'c']);
  });

  it('fastest measures every offer once, then orders by the moving latency of the request’s mode', () => {
    const { stats } = clockStats(60_000);
    const fastest = opts({ strategy: 'fastest' }, stats);
    // Never measured: each goes first once.
    const firsts = [];
    for (const [o, ms] of [
      [A, 80],
      [B, 40],
      [C, 5],
    ] as const) {
      const plan = planOffers(model, fastest, size);
      firsts.push(plan[0]?.provider);
      stats.record(o, 'ok', ms, 'full');
    }
    expect(firsts).toEqual(['a', 'b', 'c']);
    expect(providers(planOffers(model, fastest, size))).toEqual(['c', 'b', 'a']);
    // Streams are measured separately (time to first token): unmeasured there, so a goes first.
    expect(planOffers(model, { ...fastest, stream: true }, size)[0]?.provider).toBe('a');
    // c slows down: one sample moves its average by LATENCY_ALPHA of the difference.
    stats.record(C, 'ok', 200, 'full');
    expect(stats.latencyMs(C, 'full')).toBeCloseTo(5 + LATENCY_ALPHA * 195, 6);
    expect(providers(planOffers(model, fastest, size))).toEqual(['b', 'c', 'a']);
  });

  it('fastest re-measures a slower offer once the remeasure period and EXPLORE_EVERY plans have passed', () => {
    const { clock, stats } = clockStats(1000);
    const fastest = opts({ strategy: 'fastest' }, stats);
    stats.record(A, 'ok', 80, 'full');
    stats.record(B, 'ok', 40, 'full');
    stats.record(C, 'ok', 5, 'full');
    clock.now += 999;
    for (let i = 0; i < EXPLORE_EVERY * 2; i++) expect(planOffers(model, fastest, size)[0]?.provider).toBe('c');
    clock.now += 1;
    // a and b are due; a was measured longest ago (same instant: configured order) and goes first once.
    expect(providers(planOffers(model, fastest, size))).toEqual(['a', 'c', 'b']);
    const next = [];
    for (let i = 0; i < EXPLORE_EVERY; i++) next.push(planOffers(model, fastest, size)[0]?.provider);
    expect(next.slice(0, EXPLORE_EVERY - 1)).toEqual(Array(EXPLORE_EVERY - 1).fill('c'));
    expect(next.at(-1)).toBe('b');
  });

  it('best orders by success rate in whole percent, then latency', () => {
    const { stats } = clockStats(60_000);
    stats.record(A, 'ok', 5, 'full');
    stats.record(B, 'ok', 40, 'full');
    stats.record(C, 'ok', 20, 'full');
    const best = opts({ strategy: 'best' }, stats);
    expect(providers(planOffers(model, best, size))).toEqual(['a', 'c', 'b']);
    stats.record(A, 'error', 1, 'full');
    expect(stats.successRate(A)).toBeCloseTo(0.8, 6);
    expect(providers(planOffers(model, best, size))).toEqual(['c', 'b', 'a']);
  });

  it('a measure left stale by lost traffic gives way fast to what a re-measure finds: a timeout or an error is not remembered for minutes', () => {
    const { clock, stats } = clockStats(30_000);
    stats.record(C, 'ok', 20, 'full');
    // One timeout at 2 s: c's average jumps, and with its traffic gone only a re-measure every 30 s or so samples it again.
    stats.record(C, 'timeout', 2000, 'full');
    const afterTimeout = stats.latencyMs(C, 'full') as number;
    expect(afterTimeout).toBeCloseTo(20 + LATENCY_ALPHA * 1980, 6);
    clock.now += 60_000;
    stats.record(C, 'ok', 20, 'full');
    // A fresh measure would move by LATENCY_ALPHA (to about 432 ms); one 60 s old moves by 1 - 0.7^3 = 0.657 (to about 222 ms).
    expect(stats.latencyMs(C, 'full')).toBeCloseTo(afterTimeout + (1 - (1 - LATENCY_ALPHA) ** 3) * (20 - afterTimeout), 6);
    // The same for the success rate after one error.
    stats.record(A, 'ok', 5, 'full');
    stats.record(A, 'error', 1, 'full');
    clock.now += 60_000;
    stats.record(A, 'ok', 5, 'full');
    expect(stats.successRate(A)).toBeCloseTo(0.8 + (1 - 0.8 ** 3) * 0.2, 6);
    // Traffic keeps a measure fresh: back to the plain weight.
    stats.record(A, 'error', 1, 'full');
    expect(stats.successRate(A)).toBeCloseTo((0.8 + (1 - 0.8 ** 3) * 0.2) * 0.8, 6);
  });

  it('a pin keeps one offer and never fails over; prefer goes first; max hops bound the offers held', () => {
    expect(providers(planOffers(model, opts({ pin: 'b' }), size))).toEqual(['b']);
    expect(() => planOffers(model, opts({ pin: 'z' }), size)).toThrowError(expect.objectContaining({ code: 'provider_unsupported' }));
    expect(providers(planOffers(model, opts({ prefer: 'c' }), size))).toEqual(['c', 'a', 'b']);
    // The walk attempts the first plus maxHops; the offers after them stand in for one skipped.
    expect(providers(heldOffers(planOffers(model, opts({ maxHops: 0 }), size), 0))).toEqual(['a']);
    const cheapest = planOffers(model, opts({ maxHops: 1, strategy: 'cheapest' }), { promptTokens: 10_000, maxTokens: 1 });
    expect(providers(cheapest)).toEqual(['c', 'b', 'a']);
    expect(providers(heldOffers(cheapest, 1))).toEqual(['c', 'b']);
  });

  it('no healthy offer to begin with: 503 no_healthy_provider with Retry-After until the first probe', () => {
    const { clock, stats } = clockStats();
    for (const o of [A, B, C]) for (let i = 0; i < 3; i++) stats.record(o, 'timeout', 30_000, 'full');
    clock.now += 100;
    const err = (() => {
      try {
        planOffers(model, opts({}, stats), size);
      } catch (e) {
        return e;
      }
    })() as GatewayError;
    expect(err).toBeInstanceOf(GatewayError);
    expect(err.code).toBe('no_healthy_provider');
    expect(err.retryAfterS).toBe(1);
    expect(() => planOffers(model, opts({ pin: 'a' }, stats), size)).toThrowError(expect.objectContaining({ code: 'no_healthy_provider' }));
    clock.now += 400;
    expect(providers(planOffers(model, opts({}, stats), size))).toEqual(['a', 'b', 'c']);
  });
});
