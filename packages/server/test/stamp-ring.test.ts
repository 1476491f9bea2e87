import { describe, expect, it } from 'vitest';
import { MemoryWindowLimiter } from '../src/limits/memory-window.js';
import { StampRing } from '../src/limits/stamp-ring.js';

describe('a key’s ring of timestamps', () => {
  it('keeps order across wrap-around and growth, dropping only what is at or before the cutoff', () => {
    const ring = new StampRing(4);
    const held: number[] = [];
    let next = 0;
    // Interleaved adds and drops move the head around the ring while it grows from 4 to 64 places.
    for (let round = 0; round < 40; round++) {
      for (let i = 0; i < 3; i++) {
        ring.push(next);
        held.push(next++);
      }
      const cutoff = held[0] as number;
      ring.dropThrough(cutoff);
      held.shift();
      expect(ring.size).toBe(held.length);
      expect(ring.oldest()).toBe(held[0]);
      expect(ring.newest()).toBe(held.at(-1));
    }
    expect(ring.capacity).toBe(128);
    ring.dropThrough(next - 5);
    expect([ring.size, ring.oldest(), ring.newest()]).toEqual([4, next - 4, next - 1]);
    ring.shrink();
    expect(ring.capacity).toBe(16);
    expect([ring.size, ring.oldest(), ring.newest()]).toEqual([4, next - 4, next - 1]);
    ring.dropThrough(next);
    expect([ring.size, ring.oldest(), ring.newest()]).toEqual([0, undefined, undefined]);
  });
});

describe('the in-process limiter with a busy key', () => {
  it('counts 300,000 requests in a minute exactly, slides, and gives the memory back once the key goes quiet', () => {
    const start = 1_790_000_000_000;
    let now = start;
    const limiter = new MemoryWindowLimiter(() => now);
    // 5 requests per ms for 60 s, against a limit of 300,000 per minute: the last one fills the window.
    for (let i = 0; i < 300_000; i++) {
      now = start + Math.floor(i / 5);
      expect(limiter.hitSync('busy', 300_000).allowed).toBe(true);
    }
    expect(limiter.hitSync('busy', 300_000)).toMatchObject({ allowed: false, remaining: 0, resetS: 1 });
    expect(limiter.windowOf('busy')?.size).toBe(300_000);
    // The first second's 5,000 have aged out.
    now = start + 60_999;
    expect(limiter.hitSync('busy', 300_000)).toMatchObject({ allowed: true, remaining: 5_000 - 1 });
    // Then a trickle: after a sweep the ring holds what is left in far less room.
    now += 60_000;
    for (let i = 0; i < 10; i++) limiter.hitSync('busy', 300_000);
    limiter.sweep();
    expect(limiter.windowOf('busy')).toMatchObject({ size: 10 });
    expect(limiter.windowOf('busy')?.capacity).toBeLessThanOrEqual(32);
    now += 60_000;
    limiter.sweep();
    expect(limiter.windowOf('busy')).toBeUndefined();
    limiter.close();
  });
});
