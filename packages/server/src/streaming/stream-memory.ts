/** What the bound needs of a stream's session: how far its readers are behind, and a way to end it. */
export interface ReclaimableSession {
  /** Bytes of event data the slowest attached reader has not read yet (all the session holds when none is attached and the stream runs). */
  backlog(): number;
  /** Ends the stream if it runs and lets go of its events; readers that had not read them all get an error event. */
  reclaim(message: string): void;
}

/** One stream's event data in this instance's memory, held by its session, its in-memory resume copy, or both (they share the strings). */
export interface MemoryHold {
  readonly streamId: string;
  bytes: number;
  session: ReclaimableSession | null;
  /** Drops the in-memory resume copy (null: none, as with Redis). */
  dropCopy: (() => void) | null;
}

/** A reader this much behind or less keeps up (it is only ever one upstream read behind); only one further behind is ended. */
export const BEHIND_MIN_BYTES = 256 * 1024;
/**
 * What a stream and each of its events hold besides the event data, counted with it so that the bound is on memory,
 * not on data alone: an event's object, its slots in the session's log and the resume copy's, its string's header; a
 * stream's entries in the maps, its copy's record and meta, its id. Measured (heap after a full collection, 44,000
 * streams of five short events kept for resume): 1,060 bytes a stream beyond its data, which the count of data alone
 * left out, so that short streams held twice the bound.
 */
export const EVENT_OVERHEAD_BYTES = 64;
export const STREAM_OVERHEAD_BYTES = 768;
/** After a reclaim that found nothing to let go, the next waits for at least this much more data. */
const RETRY_STEP_BYTES = 1024 * 1024;

/**
 * The bound on the event data all streams together hold in this instance's
 * memory. Counted with a running total (one addition per event); when an
 * event takes the total past the bound, a reclaim runs once the current
 * read has been handled: first the in-memory resume copies of finished
 * streams, oldest first, then the stream whose readers are furthest behind
 * (a stream whose readers keep up is never ended).
 */
export class StreamMemory {
  private total = 0;
  private readonly holds = new Map<string, MemoryHold>();
  /** Streams whose last event is in their resume copy, in the order they ended (a Map keeps insertion order). */
  private readonly finished = new Map<string, MemoryHold>();
  private reclaimQueued = false;
  /**
   * A reclaim runs when the total passes this: the bound, or, after a reclaim
   * that found nothing to let go (every reader keeping up), a little above the
   * total then, so that streams which keep up do not cost a scan per read.
   */
  private threshold: number;
  /** Streams ended and resume copies dropped by the bound, for the operator. */
  readonly reclaimed = { copies: 0, streams: 0 };

  constructor(readonly limit: number) {
    this.threshold = limit;
  }

  /** Event data held now, in UTF-16 code units (as the per-stream bound counts), with each stream's and event's bookkeeping. */
  get bytes(): number {
    return this.total;
  }

  /** The stream's hold, opened on first use. */
  hold(streamId: string): MemoryHold {
    let h = this.holds.get(streamId);
    if (!h) {
      h = { streamId, bytes: 0, session: null, dropCopy: null };
      this.holds.set(streamId, h);
      this.add(h, STREAM_OVERHEAD_BYTES);
    }
    return h;
  }

  add(h: MemoryHold, bytes: number): void {
    h.bytes += bytes;
    this.total += bytes;
    if (this.total > this.threshold) this.queueReclaim();
  }

  private queueReclaim(): void {
    if (this.reclaimQueued) return;
    this.reclaimQueued = true;
    // After the read that brought the event is handled whole: never inside a session's own push.
    queueMicrotask(this.reclaim);
  }

  /** The stream's resume copy holds its last event: from now on it is kept for resume only, once its session lets go. */
  ended(h: MemoryHold): void {
    if (h.dropCopy) this.finished.set(h.streamId, h);
  }

  releaseSession(h: MemoryHold): void {
    h.session = null;
    // Its resume copy can go from now on: while over the bound it goes at once, not only once some later event
    // takes the total past a threshold raised while every stream kept up (which may never come).
    if (h.dropCopy !== null && this.total > this.limit) this.queueReclaim();
    this.forgetIfFree(h);
  }

  releaseCopy(h: MemoryHold): void {
    h.dropCopy = null;
    this.finished.delete(h.streamId);
    this.forgetIfFree(h);
  }

  private forgetIfFree(h: MemoryHold): void {
    if (h.session !== null || h.dropCopy !== null || this.holds.get(h.streamId) !== h) return;
    this.holds.delete(h.streamId);
    this.total -= h.bytes;
    h.bytes = 0;
    // The threshold follows the total down: raised at a peak of streams that kept up, it would otherwise let a
    // stalled stream grow up to that peak after they ended.
    if (this.total <= this.limit) this.threshold = this.limit;
    else this.threshold = Math.min(this.threshold, this.total + this.retryStep());
  }

  private retryStep(): number {
    return Math.max(RETRY_STEP_BYTES, this.limit / 32);
  }

  private readonly reclaim = (): void => {
    this.reclaimQueued = false;
    while (this.total > this.limit) {
      if (this.dropOldestCopy()) continue;
      if (!this.endFurthestBehind()) {
        this.threshold = this.total + this.retryStep();
        return;
      }
    }
  };

  /** The resume copy of the stream that ended first among those no reader holds. */
  private dropOldestCopy(): boolean {
    for (const h of this.finished.values()) {
      if (h.session !== null) continue;
      this.reclaimed.copies++;
      const drop = h.dropCopy;
      this.releaseCopy(h);
      drop?.();
      return true;
    }
    return false;
  }

  private endFurthestBehind(): boolean {
    let worst: MemoryHold | null = null;
    let most = BEHIND_MIN_BYTES;
    for (const h of this.holds.values()) {
      const behind = h.session?.backlog() ?? 0;
      if (behind > most) {
        worst = h;
        most = behind;
      }
    }
    if (worst === null) return false;
    this.reclaimed.streams++;
    const session = worst.session as ReclaimableSession;
    const drop = worst.dropCopy;
    session.reclaim(
      `The gateway ended this stream: its instance keeps at most ${mib(this.limit)} MiB of stream events (GW_STREAM_MEMORY_MB), ` +
        `and this stream's reader was the furthest behind (${mib(most)} MiB not read).`,
    );
    this.releaseSession(worst);
    if (drop) {
      this.releaseCopy(worst);
      drop();
    }
    return true;
  }
}

function mib(bytes: number): string {
  return (bytes / 1024 / 1024).toFixed(1).replace(/\.0$/, '');
}
