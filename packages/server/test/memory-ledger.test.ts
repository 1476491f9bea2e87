import { afterEach, describe, expect, it, vi } from 'vitest';
import { type BudgetScope, RESERVATION_TTL_MS, type Reservation } from '../src/limits/budget-types.js';
import { MemoryLedger } from '../src/limits/memory-ledger.js';

const scope = (limit: number, spent = 0): BudgetScope => ({ id: 'key:k1', limit, loadSpent: async () => spent });
const held = async (ledger: MemoryLedger) => (await ledger.peek('t', 'key:k1'))?.reserved ?? 0;

afterEach(() => {
  vi.useRealTimers();
});

describe('the in-process budget ledger', () => {
  it('holds worst cases up to the limit, settles to the real cost, and releases', async () => {
    const ledger = new MemoryLedger();
    const a = await ledger.reserve('t', [scope(1)], 0.4, 'r1');
    const b = await ledger.reserve('t', [scope(1)], 0.4, 'r2');
    expect([a.ok, b.ok]).toEqual([true, true]);
    expect((await ledger.reserve('t', [scope(1)], 0.4, 'r3')).ok).toBe(false);
    expect(await held(ledger)).toBeCloseTo(0.8, 9);
    await ledger.settle((a as { reservation: Reservation }).reservation, 0.1);
    await ledger.release((b as { reservation: Reservation }).reservation);
    // Settling or releasing twice changes nothing.
    await ledger.release((b as { reservation: Reservation }).reservation);
    expect(await ledger.peek('t', 'key:k1')).toEqual({ spent: 0.1, reserved: 0 });
    expect((await ledger.reserve('t', [scope(1)], 0.9, 'r4')).ok).toBe(true);
    expect((await ledger.reserve('t', [scope(1)], 0.01, 'r5')).ok).toBe(false);
  });

  it('forgets the hold of a request that never settled once its time is up', async () => {
    // A hold lives 300 ms here (RESERVATION_TTL_MS in the gateway), unrenewed; expired holds are swept once a second.
    const ledger = new MemoryLedger(undefined, 300);
    ledger.stop();
    expect((await ledger.reserve('t', [scope(1)], 0.7, 'lost')).ok).toBe(true);
    expect((await ledger.reserve('t', [scope(1)], 0.7, 'next')).ok).toBe(false);
    await new Promise((r) => setTimeout(r, 1_200));
    expect(await held(ledger)).toBe(0);
    expect((await ledger.reserve('t', [scope(1)], 0.7, 'next')).ok).toBe(true);
    expect(await held(ledger)).toBeCloseTo(0.7, 9);
  });

  it('keeps the hold of a request still running when the wall clock steps past its life: a hold is timed on the monotonic clock', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(new Date('2026-11-23T12:00:00Z'));
    const ledger = new MemoryLedger();
    try {
      expect((await ledger.reserve('t', [scope(1)], 0.7, 'running')).ok).toBe(true);
      vi.setSystemTime(Date.now() + RESERVATION_TTL_MS + 1_001);
      expect(await held(ledger)).toBeCloseTo(0.7, 9);
      expect((await ledger.reserve('t', [scope(1)], 0.7, 'next')).ok).toBe(false);
    } finally {
      ledger.stop();
    }
  });
});

describe('holds of requests that run longer than a hold lives', () => {
  it('are renewed while unsettled, so their room is not admitted twice', async () => {
    // A hold lives 300 ms here (15 minutes in the gateway); renewed once a third of that has passed. Expired holds are
    // swept once a second: 1.2 s is past both.
    const life = 300;
    const renewed = new MemoryLedger(undefined, life);
    const lapsing = new MemoryLedger(undefined, life);
    // Without its renewal, the same hold lapses while its request runs.
    lapsing.stop();
    try {
      for (const ledger of [renewed, lapsing]) expect((await ledger.reserve('t', [scope(1)], 0.8, 'r-long')).ok).toBe(true);
      await new Promise((r) => setTimeout(r, life * 4));
      // Still running: its 0.8 is still held, and 0.4 more does not fit.
      expect((await renewed.reserve('t', [scope(1)], 0.4, 'r-next')).ok).toBe(false);
      expect((await lapsing.reserve('t', [scope(1)], 0.4, 'r-next')).ok).toBe(true);
    } finally {
      renewed.stop();
    }
  });
});
