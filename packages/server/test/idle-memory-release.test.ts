import { describe, expect, it } from 'vitest';
import { collectGarbage } from '../src/lib/collect-garbage.js';
import { IdleMemoryRelease } from '../src/lib/idle-memory-release.js';
import { startGateway } from './helpers/gateway.js';

const MB = 2 ** 20;

/** A release policy over a fake clock, fake traffic and a fake resident size. */
function harness(startRss = 100 * MB) {
  const state = { started: 0, inFlight: 0, rss: startRss, collected: 0 };
  const release = new IdleMemoryRelease({
    checkEveryMs: 500,
    idleForMs: 2_000,
    minGrowthBytes: 32 * MB,
    traffic: () => state,
    rss: () => state.rss,
    collect: () => {
      state.collected++;
      state.rss = startRss + 5 * MB;
    },
  });
  return { state, release };
}

describe('handing memory back when idle', () => {
  it('survives a resident size it cannot read (every file descriptor taken: EMFILE), and looks again next time', async () => {
    let reads = 0;
    const release = new IdleMemoryRelease({
      checkEveryMs: 5,
      idleForMs: 0,
      minGrowthBytes: 1,
      traffic: () => ({ started: 0, inFlight: 0 }),
      rss: () => {
        // The first read is the constructor's baseline; the timer's reads fail.
        if (reads++ > 0) throw Object.assign(new Error('EMFILE: too many open files, uv_resident_set_memory'), { code: 'EMFILE' });
        return 100 * MB;
      },
      collect: () => {},
    });
    release.start();
    // Looks every 5 ms; a busy machine runs fewer of them in a given time, so wait for them rather than for the time.
    for (let waited = 0; reads <= 3 && waited < 2_000; waited += 10) await new Promise((r) => setTimeout(r, 10));
    release.stop();
    // Several looks ran and failed; none of them ended the process (an uncaught error in a timer would fail this run).
    expect(reads).toBeGreaterThan(3);
  });

  it('waits for idleForMs without a new request, then collects once', () => {
    const { state, release } = harness();
    state.started = 10;
    state.rss = 180 * MB;
    expect(release.check(0)).toBe(false);
    expect(release.check(1_000)).toBe(false);
    expect(release.check(1_999)).toBe(false);
    expect(release.check(2_000)).toBe(true);
    expect(state.collected).toBe(1);
    // Nothing grew since: no second pause.
    expect(release.check(10_000)).toBe(false);
    expect(state.collected).toBe(1);
  });

  it('measures growth from the lowest memory seen while busy too, not from a high point at its start', () => {
    // Built while the start's transients held 240 MB; the gateway settled at 187 under traffic, then a burst took it to 254.
    const { state, release } = harness(240 * MB);
    state.rss = 187 * MB;
    for (let t = 0; t <= 5_000; t += 500) {
      state.started++;
      release.check(t);
    }
    state.rss = 254 * MB;
    state.started++;
    expect(release.check(5_500)).toBe(false);
    expect(release.check(7_500)).toBe(true);
  });

  it('never collects while requests keep arriving or one is in flight', () => {
    const { state, release } = harness();
    state.rss = 300 * MB;
    for (let t = 0; t <= 10_000; t += 500) {
      state.started++;
      expect(release.check(t)).toBe(false);
    }
    // A long stream: no new request, but one in flight.
    state.inFlight = 1;
    for (let t = 10_500; t <= 20_000; t += 500) expect(release.check(t)).toBe(false);
    state.inFlight = 0;
    expect(release.check(20_500)).toBe(false);
    expect(release.check(22_500)).toBe(true);
    expect(state.collected).toBe(1);
  });

  it('leaves growth under minGrowthBytes alone, and measures growth from where memory went back down to', () => {
    const { state, release } = harness(100 * MB);
    state.rss = 120 * MB;
    release.check(0);
    expect(release.check(5_000)).toBe(false);
    // Memory went down by itself: the baseline follows it, so 90 -> 125 MB counts as 35 MB of growth.
    state.rss = 90 * MB;
    expect(release.check(5_500)).toBe(false);
    state.rss = 125 * MB;
    expect(release.check(6_000)).toBe(true);
  });
});

describe('collectGarbage', () => {
  it("'last-resort' hands back the heap pages an ordinary collection keeps pooled", () => {
    const rss = () => process.memoryUsage.rss();
    // About 100 MB of small objects, most of them garbage by the end.
    let keep: unknown[] = [];
    for (let i = 0; i < 1_500_000; i++) {
      keep.push({ i, s: `item-${i}`, a: [i, i + 1] });
      if (keep.length > 300_000) keep = keep.slice(150_000);
    }
    keep = [];
    expect(collectGarbage('regular')).toBe(true);
    const afterRegular = rss();
    expect(collectGarbage('last-resort')).toBe(true);
    const afterLastResort = rss();
    expect(afterRegular - afterLastResort).toBeGreaterThan(20 * MB);
  });
});

describe('what keeps the gateway from being idle', () => {
  it('counts requests to either variant of the API, not health checks, metrics scrapes or the admin API', async () => {
    const gw = await startGateway();
    try {
      const { id, key } = await gw.createKey();
      const lifecycle = gw.gateway.services.lifecycle;
      const before = lifecycle.apiRequests;
      for (const path of ['/healthz', '/readyz', '/metrics']) expect((await fetch(`${gw.url}${path}`)).status).toBe(200);
      expect((await gw.admin('GET', `/keys/${id}`)).status).toBe(200);
      expect(lifecycle.apiRequests).toBe(before);
      const auth = { authorization: `Bearer ${key}` };
      expect((await fetch(`${gw.baseA}/models`, { headers: auth })).status).toBe(200);
      expect((await fetch(`${gw.baseB}/models`, { headers: auth })).status).toBe(200);
      // A refused request is traffic too.
      expect((await fetch(`${gw.baseA}/models`)).status).toBe(401);
      expect(lifecycle.apiRequests).toBe(before + 3);
    } finally {
      await gw.close();
    }
  });
});

describe('the idle gateway', () => {
  it('hands memory back once idle, and counts it in /metrics', async () => {
    const gw = await startGateway({ idleMemoryRelease: { checkEveryMs: 50, idleForMs: 300, minGrowthBytes: 1 } });
    try {
      const releases = async () => {
        const text = await (await fetch(`${gw.url}/metrics`)).text();
        return Number(/^gw_idle_memory_releases_total (\S+)$/m.exec(text)?.[1]);
      };
      const { key } = await gw.createKey();
      expect((await fetch(`${gw.baseA}/models`, { headers: { authorization: `Bearer ${key}` } })).status).toBe(200);
      const afterRequest = await releases();
      expect(afterRequest).toBeGreaterThanOrEqual(0);
      const deadline = Date.now() + 10_000;
      while ((await releases()) <= afterRequest && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      expect(await releases()).toBeGreaterThan(afterRequest);
    } finally {
      await gw.close();
    }
  });
});
