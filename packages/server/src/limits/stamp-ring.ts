/**
 * One key's admitted timestamps, oldest first, in a ring of doubles that
 * doubles its capacity when full. Dropping the oldest and adding the newest
 * are O(1) whatever the window holds: a busy key at 5,000 requests/s keeps
 * 300,000 stamps in its minute, where shifting a plain array's whole
 * backing store once per millisecond cost about 6 µs per request. The
 * doubles live outside V8's heap, so the collector neither scans nor copies
 * them.
 */
export class StampRing {
  private buf: Float64Array;
  private head = 0;
  private count = 0;

  constructor(capacity = 16) {
    this.buf = new Float64Array(powerOfTwoAtLeast(capacity));
  }

  get size(): number {
    return this.count;
  }

  get capacity(): number {
    return this.buf.length;
  }

  /** The stamp `i` places after the oldest (0: the oldest), or undefined past the newest. */
  at(i: number): number | undefined {
    return i >= 0 && i < this.count ? this.buf[(this.head + i) & (this.buf.length - 1)] : undefined;
  }

  /** The oldest stamp, or undefined when empty. */
  oldest(): number | undefined {
    return this.count > 0 ? this.buf[this.head] : undefined;
  }

  /** The newest stamp, or undefined when empty. */
  newest(): number | undefined {
    return this.count > 0 ? this.buf[(this.head + this.count - 1) & (this.buf.length - 1)] : undefined;
  }

  /** Drops every stamp at or before `cutoff` (stamps are added in order, so they are all at the front). */
  dropThrough(cutoff: number): void {
    const mask = this.buf.length - 1;
    while (this.count > 0 && (this.buf[this.head] as number) <= cutoff) {
      this.head = (this.head + 1) & mask;
      this.count--;
    }
  }

  push(stamp: number): void {
    if (this.count === this.buf.length) this.resize(this.buf.length * 2);
    this.buf[(this.head + this.count) & (this.buf.length - 1)] = stamp;
    this.count++;
  }

  /** Gives memory back after a busy spell: down to twice what is held when a quarter or less is used. */
  shrink(minCapacity = 16): void {
    const target = powerOfTwoAtLeast(Math.max(minCapacity, this.count * 2));
    if (target < this.buf.length && this.count <= this.buf.length / 4) this.resize(target);
  }

  private resize(capacity: number): void {
    const next = new Float64Array(capacity);
    const mask = this.buf.length - 1;
    for (let i = 0; i < this.count; i++) next[i] = this.buf[(this.head + i) & mask] as number;
    this.buf = next;
    this.head = 0;
  }
}

function powerOfTwoAtLeast(n: number): number {
  let p = 1;
  while (p < n) p *= 2;
  return p;
}
