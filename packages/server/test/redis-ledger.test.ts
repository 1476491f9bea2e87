import { describe, expect, it, vi } from 'vitest';
import { ALIVE_TTL_MS, InstancePresence, instanceKey } from '../src/kv/instance-presence.js';
import { RESERVATION_TTL_MS, toNano } from '../src/limits/budget-types.js';
import { RedisLedger } from '../src/limits/redis-ledger.js';
import { useRedis } from './helpers/redis.js';

const fixture = useRedis();
const ledgerOf = (presence = new InstancePresence(fixture.redis)) => new RedisLedger(fixture.redis, presence);

const base = (tag: string) => `gw:budget:{${tag}}:key:k1`;
const scope = (limit: number) => ({ id: 'key:k1', limit, loadSpent: async () => 0 });

/** Moves every hold of `tag` back in time by `ms`, as if it had been made that much earlier. */
async function ageHolds(tag: string, ms: number): Promise<void> {
  const holds = `${base(tag)}:holds`;
  const scored = await fixture.redis.zrange(holds, 0, -1, 'WITHSCORES');
  for (let i = 0; i < scored.length; i += 2) await fixture.redis.zadd(holds, 'XX', Number(scored[i + 1]) - ms, scored[i] as string);
}

describe('the Redis budget ledger keeps a running sum of its holds', () => {
  it('adds each hold and takes it off when settled; the sum decides like the holds would', async () => {
    const ledger = ledgerOf();
    const tag = 'sum-basic';
    const a = await ledger.reserve(tag, [scope(1)], 0.3, 'req_a');
    const b = await ledger.reserve(tag, [scope(1)], 0.4, 'req_b');
    expect(a.ok && b.ok).toBe(true);
    expect(Number(await fixture.redis.get(`${base(tag)}:held`))).toBe(toNano(0.7));
    // 0.7 held of 1: a third hold of 0.4 does not fit.
    expect((await ledger.reserve(tag, [scope(1)], 0.4, 'req_c')).ok).toBe(false);
    if (a.ok) await ledger.settle(a.reservation, 0.1);
    expect(Number(await fixture.redis.get(`${base(tag)}:held`))).toBe(toNano(0.4));
    expect(Number(await fixture.redis.get(`${base(tag)}:spent`))).toBe(toNano(0.1));
    // Settling twice takes nothing off twice.
    if (a.ok) await ledger.settle(a.reservation, 0.1);
    expect(Number(await fixture.redis.get(`${base(tag)}:held`))).toBe(toNano(0.4));
    expect((await ledger.reserve(tag, [scope(1)], 0.4, 'req_d')).ok).toBe(true);
  });

  it('renews a running request’s hold: its expiry, and its holds’ and sum’s lives, move to a whole hold life from now', async () => {
    const ledger = ledgerOf();
    const tag = 'renew';
    const r = await ledger.reserve(tag, [scope(1)], 0.9, 'req_long');
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    // As if taken 14 minutes ago: one more minute and it would lapse, its room admitted again while its request runs.
    await ageHolds(tag, 14 * 60_000);
    await fixture.redis.pexpire(`${base(tag)}:holds`, 60_000);
    await fixture.redis.pexpire(`${base(tag)}:held`, 60_000);
    await ledger.renew(r.reservation);
    const expiry = Number(await fixture.redis.zscore(`${base(tag)}:holds`, r.reservation.id));
    expect(expiry - Date.now()).toBeGreaterThan(RESERVATION_TTL_MS - 5_000);
    for (const key of [`${base(tag)}:holds`, `${base(tag)}:held`]) expect(await fixture.redis.pttl(key)).toBeGreaterThan(RESERVATION_TTL_MS - 5_000);
    // A settled hold is not brought back.
    await ledger.settle(r.reservation, 0.1);
    await ledger.renew(r.reservation);
    expect(await fixture.redis.zscore(`${base(tag)}:holds`, r.reservation.id)).toBeNull();
  });

  it("tells what is held by Redis's clock, as its holds' expiries are set: an instance whose clock is ahead still sees a live hold", async () => {
    const ledger = ledgerOf();
    const tag = 'peek-clock';
    expect(await ledger.peek(tag, 'key:k1')).toBeNull();
    const r = await ledger.reserve(tag, [scope(1)], 0.25, 'req_running');
    expect(r.ok).toBe(true);
    const now = Date.now();
    // This instance's clock 20 minutes ahead (a VM resumed from a pause), past the hold's 15-minute life.
    const ahead = vi.spyOn(Date, 'now').mockReturnValue(now + 20 * 60_000);
    try {
      expect(await ledger.peek(tag, 'key:k1')).toEqual({ spent: 0, reserved: 0.25 });
    } finally {
      ahead.mockRestore();
    }
    // A hold that did lapse by Redis's clock is not counted, whatever this instance's clock says.
    await ageHolds(tag, RESERVATION_TTL_MS + 1_000);
    expect(await ledger.peek(tag, 'key:k1')).toEqual({ spent: 0, reserved: 0 });
  });

  it('takes expired holds (of instances that died) off the sum', async () => {
    const ledger = ledgerOf();
    const tag = 'sum-expiry';
    expect((await ledger.reserve(tag, [scope(1)], 0.9, 'req_live')).ok).toBe(true);
    // A hold whose request never settled, already past its expiry.
    await fixture.redis.zadd(`${base(tag)}:holds`, Date.now() - 1000, `req_dead:${toNano(0.5)}`);
    await fixture.redis.incrby(`${base(tag)}:held`, toNano(0.5));
    const r = await ledger.reserve(tag, [scope(1.05)], 0.1, 'req_next');
    expect(r.ok).toBe(true);
    expect(Number(await fixture.redis.get(`${base(tag)}:held`))).toBe(toNano(1.0));
    expect(await fixture.redis.zscore(`${base(tag)}:holds`, `req_dead:${toNano(0.5)}`)).toBeNull();
  });

  it('a refusal first lets go of holds whose instance is no longer alive; a live instance keeps its holds', async () => {
    const tag = 'dead-holder';
    const doomed = new InstancePresence(fixture.redis);
    const living = new InstancePresence(fixture.redis);
    expect((await ledgerOf(doomed).reserve(tag, [scope(1)], 0.5, 'req_doomed')).ok).toBe(true);
    expect((await ledgerOf(living).reserve(tag, [scope(1)], 0.4, 'req_living')).ok).toBe(true);
    const ledger = ledgerOf();
    // Both holders alive: 0.9 of 1 is held, and 0.3 more does not fit.
    expect((await ledger.reserve(tag, [scope(1)], 0.3, 'req_next')).ok).toBe(false);
    // The first instance stops saying it is alive (as one killed outright does once its word lapses), and its hold is
    // older than that word lasts (a younger one may be a live instance's whose word Redis lost; below).
    await doomed.close();
    await ageHolds(tag, ALIVE_TTL_MS + 1000);
    expect((await ledger.reserve(tag, [scope(1)], 0.3, 'req_next')).ok).toBe(true);
    expect(Number(await fixture.redis.get(`${base(tag)}:held`))).toBe(toNano(0.7));
    // The live instance's hold is still there: 0.4 + 0.3 held, so 0.4 more does not fit.
    expect((await ledger.reserve(tag, [scope(1)], 0.4, 'req_more')).ok).toBe(false);
    await living.close();
  });

  it('keeps a fresh hold whose instance Redis forgot (a restart empties its word too): its request still runs, and its settle adds its cost', async () => {
    const tag = 'forgotten-holder';
    const living = new InstancePresence(fixture.redis);
    const held = await ledgerOf(living).reserve(tag, [scope(1)], 0.6, 'req_living');
    expect(held.ok).toBe(true);
    // What an empty Redis after a restart looks like to the others: the word is gone, the new hold is not.
    await fixture.redis.del(instanceKey(living.id));
    const other = ledgerOf();
    expect((await other.reserve(tag, [scope(1)], 0.5, 'req_other')).ok).toBe(false);
    expect(Number(await fixture.redis.get(`${base(tag)}:held`))).toBe(toNano(0.6));
    if (held.ok) await ledgerOf(living).settle(held.reservation, 0.55);
    expect(Number(await fixture.redis.get(`${base(tag)}:spent`))).toBe(toNano(0.55));
    // 0.55 spent of 1: the room the hold kept was never given out twice.
    expect((await other.reserve(tag, [scope(1)], 0.5, 'req_other')).ok).toBe(false);
    await living.close();
  });

  it('loading a total, holds the room the database leases keep until they lapse: instances still on them admit from it', async () => {
    const tag = 'leased-at-load';
    const ledger = ledgerOf();
    const leasedScope = (ms: number) => ({ ...scope(1), loadSpent: async () => 0.2, loadLeased: async () => ({ nano: toNano(0.5), ms }) });
    // 0.2 spent and 0.5 leased of 1: 0.3 is left, not 0.8.
    expect((await ledger.reserve(tag, [leasedScope(300)], 0.4, 'req_1')).ok).toBe(false);
    const fits = await ledger.reserve(tag, [leasedScope(300)], 0.3, 'req_2');
    expect(fits.ok).toBe(true);
    // Only the call that loaded the total held the leases; a load after it adds nothing.
    expect(Number(await fixture.redis.get(`${base(tag)}:held`))).toBe(toNano(0.8));
    if (fits.ok) await ledger.settle(fits.reservation, 0.1);
    // Once the leases lapse, their room comes back: 0.3 spent of 1.
    await new Promise((r) => setTimeout(r, 400));
    expect((await ledger.reserve(tag, [leasedScope(300)], 0.7, 'req_3')).ok).toBe(true);
  });

  it('rebuilds a missing sum from the holds, and drops a sum whose holds are gone', async () => {
    const ledger = ledgerOf();
    const tag = 'sum-rebuild';
    expect((await ledger.reserve(tag, [scope(1)], 0.6, 'req_1')).ok).toBe(true);
    await fixture.redis.del(`${base(tag)}:held`);
    // Rebuilt: 0.6 is still held, so 0.5 more does not fit.
    expect((await ledger.reserve(tag, [scope(1)], 0.5, 'req_2')).ok).toBe(false);
    expect(Number(await fixture.redis.get(`${base(tag)}:held`))).toBe(toNano(0.6));
    await fixture.redis.del(`${base(tag)}:holds`);
    // No hold left: the stale sum holds nothing back.
    expect((await ledger.reserve(tag, [scope(1)], 0.9, 'req_3')).ok).toBe(true);
    expect(Number(await fixture.redis.get(`${base(tag)}:held`))).toBe(toNano(0.9));
  });

  it('settles of one turn of the event loop go as one script call per set of scopes, each exact', async () => {
    const ledger = ledgerOf();
    const tags = ['batch-a', 'batch-b'];
    const held = [];
    for (const tag of tags) {
      for (let i = 0; i < 20; i++) {
        const r = await ledger.reserve(tag, [scope(100)], 0.5, `req_${i}`);
        if (!r.ok) throw new Error('the hold should fit');
        held.push(r.reservation);
      }
    }
    // Once first, so that the script is loaded and every call below is one EVALSHA.
    const warm = await ledger.reserve('batch-warm', [scope(100)], 0.5, 'req_warm');
    if (warm.ok) await ledger.settle(warm.reservation, 0);
    const monitor = await fixture.redis.duplicate().monitor();
    const evals: string[] = [];
    monitor.on('monitor', (_time: string, args: string[]) => {
      if (/^evalsha$/i.test(args[0] ?? '')) evals.push(args.join(' '));
    });
    // 40 settles issued together (one of them twice), 0.01 each: two calls, one per tag.
    await Promise.all([...held, held[0]].map((r) => (r ? ledger.settle(r, 0.01) : null)));
    // MONITOR reports a moment later: wait for a marker sent after the settles.
    const seen = new Promise<void>((resolve) => monitor.on('monitor', (_t: string, args: string[]) => args[1] === 'batch-marker' && resolve()));
    await fixture.redis.echo('batch-marker');
    await seen;
    await monitor.disconnect();
    expect(evals.filter((e) => e.includes('batch-a')).length).toBe(1);
    expect(evals.filter((e) => e.includes('batch-b')).length).toBe(1);
    for (const tag of tags) {
      expect(Number(await fixture.redis.get(`${base(tag)}:held`))).toBe(0);
      expect(Number(await fixture.redis.get(`${base(tag)}:spent`))).toBe(toNano(20 * 0.01));
      expect(await fixture.redis.zcard(`${base(tag)}:holds`)).toBe(0);
    }
  });
});

describe('the Redis budget ledger while an instance reconciles', () => {
  it('with no mark a reservation is held in one script call as before; while another instance is marked it holds nothing and says so', async () => {
    const ledger = ledgerOf();
    const other = ledgerOf();
    const tag = 'reconciling';
    const monitor = await fixture.redis.monitor();
    const evals: string[][] = [];
    monitor.on('monitor', (_t: string, args: string[]) => {
      if (/^eval/i.test(args[0] ?? '')) evals.push(args);
    });
    const first = await ledger.reserveShared(tag, [scope(1)], 0.3, 'req_1');
    expect(first).toMatchObject({ ok: true });
    await other.markReconciling();
    expect(await ledger.reserveShared(tag, [scope(1)], 0.3, 'req_2')).toBe('reconciling');
    await expect(ledger.reserve(tag, [scope(1)], 0.3, 'req_3')).rejects.toThrow(/reconciling/);
    await other.unmarkReconciling();
    expect(await fixture.redis.exists('gw:budget:reconciling')).toBe(0);
    expect(await ledger.reserveShared(tag, [scope(1)], 0.3, 'req_4')).toMatchObject({ ok: true });
    const seen = new Promise<void>((resolve) => monitor.on('monitor', (_t: string, args: string[]) => args[1] === 'reconciling-marker' && resolve()));
    await fixture.redis.echo('reconciling-marker');
    await seen;
    await monitor.disconnect();
    // Nothing was held for the refused ones: the two admitted holds only. The load of the total aside, one script call per reservation.
    expect(Number(await fixture.redis.get(`${base(tag)}:held`))).toBe(toNano(0.6));
    expect(evals.filter((e) => e.some((a) => a.endsWith('gw:budget:reconciling')) && /^evalsha$/i.test(e[0] ?? '')).length).toBeGreaterThanOrEqual(4);
  });

  it('a mark lapses by itself when its instance stops making it', async () => {
    await ledgerOf().markReconciling();
    const ttl = await fixture.redis.pttl('gw:budget:reconciling');
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(5_000);
    await fixture.redis.del('gw:budget:reconciling');
  });
});
