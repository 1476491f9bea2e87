/**
 * Requests a limiter let through unenforced, oldest first, until they are written to the shared window: three
 * parallel arrays rather than an object per request, since an outage keeps a minute of them (tens of thousands at a
 * few hundred requests a second), which the collector would otherwise promote and trace one by one.
 */
export class UnenforcedLog {
  private keyIds: string[] = [];
  private ats: number[] = [];
  private requestIds: string[] = [];
  /** The index of the oldest entry still owed; those before it are written or aged out. */
  private head = 0;

  get empty(): boolean {
    return this.head >= this.ats.length;
  }

  /** One past the newest entry: what a write that begins now covers, from {@link first}. */
  get end(): number {
    return this.ats.length;
  }

  get first(): number {
    return this.head;
  }

  push(keyId: string, at: number, requestId: string): void {
    this.keyIds.push(keyId);
    this.ats.push(at);
    this.requestIds.push(requestId);
  }

  keyIdAt(i: number): string {
    return this.keyIds[i] as string;
  }

  atAt(i: number): number {
    return this.ats[i] as number;
  }

  requestIdAt(i: number): string {
    return this.requestIds[i] as string;
  }

  /** The entries before `end` are written. Indexes stay valid until the next {@link dropThrough} or {@link compact}. */
  writtenTo(end: number): void {
    this.head = Math.max(this.head, end);
  }

  /** Forgets the entries made at or before `at` (aged out of the window). */
  dropThrough(at: number): void {
    while (this.head < this.ats.length && (this.ats[this.head] as number) <= at) this.head++;
  }

  /** Frees the room of entries no longer owed, once they are most of the arrays. Moves indexes: not during a write. */
  compact(): void {
    if (this.head <= 1024 || this.head * 2 <= this.ats.length) return;
    this.keyIds = this.keyIds.slice(this.head);
    this.ats = this.ats.slice(this.head);
    this.requestIds = this.requestIds.slice(this.head);
    this.head = 0;
  }
}
