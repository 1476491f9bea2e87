import { appendFile, readdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { makeDir } from '../lib/make-dir.js';
import { isProcessAlive } from '../lib/process-alive.js';
import type { UsageRecord } from '../store/types.js';

/** A segment is closed for appends past this size, so that one replay reads a bounded file. */
const SEGMENT_MAX_BYTES = 8 * 2 ** 20;

const SEGMENT_NAME = /^usage-(\d+)-(\d+)-(\d+)\.ndjson$/;

interface Segment {
  name: string;
  /** The creation time (ms) of its oldest record: the database's clock, which records are stamped with (store/db-clock.ts). */
  oldestAt: number;
  /**
   * This process's wall clock (Date.now()) at or after which its records were made: what the budget ledgers compare
   * their costs' times with (UsageWriter.storedBefore), which a skew between the two clocks must not move.
   */
  madeAfter: number;
  /** The process that writes it. */
  pid: number;
}

/**
 * Usage records the database did not take, on disk until it does: a
 * directory of NDJSON segments, one record per line, appended in whole
 * batches. While the database is away the gateway's memory then holds one
 * flush interval of records at most, however long the outage, and a crash
 * (or a stop that times out) leaves them here for the next start instead
 * of losing them. Replaying a segment twice stores nothing twice: usage
 * rows are keyed by request id, and their cost is added with the rows that
 * went in (store/drizzle-store.ts).
 *
 * Appends reach the OS at once (no fsync): a process crash loses none of
 * them, a crash of the machine may lose the last ones.
 */
export class UsageSpill {
  private segments: Segment[] = [];
  /** The segment this process appends to, and its size so far. */
  private current: { segment: Segment; bytes: number } | null = null;
  private seq = 0;
  private loaded = false;

  constructor(readonly dir: string) {}

  /** Finds the segments left by earlier runs (oldest first). The directory is made only when a batch needs it. */
  async load(): Promise<void> {
    this.segments = (await this.list()).sort((a, b) => a.oldestAt - b.oldestAt);
    this.loaded = true;
  }

  /**
   * Takes in the segments another gateway on this directory left when it
   * ended after `load()` ran (stopped or killed while the database was
   * away, and not started again): nothing else would store them while this
   * process runs. Those of a process still running are its own to write.
   */
  async adoptOrphans(): Promise<void> {
    if (!this.loaded) return;
    const known = new Set(this.segments.map((s) => s.name));
    const orphans = (await this.list()).filter((s) => !known.has(s.name) && s.pid !== process.pid && !isProcessAlive(s.pid));
    if (orphans.length === 0) return;
    this.segments = [...this.segments, ...orphans].sort((a, b) => a.oldestAt - b.oldestAt);
  }

  private async list(): Promise<Segment[]> {
    const names = await readdir(this.dir).catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return [];
      throw err;
    });
    return names.flatMap((name) => {
      const m = SEGMENT_NAME.exec(name);
      if (!m) return [];
      // Made by an earlier run or another process: before any cost this process holds, whatever the clocks say.
      const oldestAt = Number(m[1]);
      return [{ name, oldestAt, madeAfter: Math.min(oldestAt, performance.timeOrigin), pid: Number(m[2]) }];
    });
  }

  /** How many segments wait to be replayed. */
  get waiting(): number {
    return this.segments.length;
  }

  /** The creation time of the oldest record on disk; null when there is none. */
  get oldestAt(): number | null {
    let oldest: number | null = null;
    for (const s of this.segments) oldest = oldest === null ? s.oldestAt : Math.min(oldest, s.oldestAt);
    return oldest;
  }

  /** This process's wall-clock time at or after which every record on disk was made; null when there is none. */
  get oldestMadeAfter(): number | null {
    let oldest: number | null = null;
    for (const s of this.segments) oldest = oldest === null ? s.madeAfter : Math.min(oldest, s.madeAfter);
    return oldest;
  }

  /**
   * Appends `records` (a failed batch) as one write; rejects if the disk does not take them (they stay the caller's).
   * `madeAfter`: this process's wall-clock time at or after which they were all made.
   */
  async append(records: readonly UsageRecord[], madeAfter: number): Promise<void> {
    if (records.length === 0) return;
    if (!this.loaded) await this.load();
    const text = records
      .map((r) => JSON.stringify(r))
      .join('\n')
      .concat('\n');
    // A loop, not Math.min(...): a batch left behind a long database stall can hold more records than a call takes arguments.
    let oldestAt = Number.POSITIVE_INFINITY;
    for (const r of records) oldestAt = Math.min(oldestAt, r.createdAt.getTime());
    if (this.current && this.current.bytes < SEGMENT_MAX_BYTES) {
      try {
        await appendFile(join(this.dir, this.current.segment.name), text);
      } catch (err) {
        // The disk may have taken part of a line: the batch (still the caller's) goes to a new segment next time,
        // since one appended after that part would make the next line unreadable, and its record lost.
        this.current = null;
        throw err;
      }
      this.current.bytes += Buffer.byteLength(text);
      this.current.segment.oldestAt = Math.min(this.current.segment.oldestAt, oldestAt);
      this.current.segment.madeAfter = Math.min(this.current.segment.madeAfter, madeAfter);
      return;
    }
    // Listed only once its first batch is on disk: a disk that refused it (full) left no segment to count in
    // /metrics, to hold back `oldestAt`, nor to be "stored" with no records; what it took of the batch goes.
    const segment = { name: `usage-${oldestAt}-${process.pid}-${this.seq++}.ndjson`, oldestAt, madeAfter, pid: process.pid };
    const file = join(this.dir, segment.name);
    try {
      await makeDir(this.dir);
      await appendFile(file, text);
    } catch (err) {
      await rm(file, { force: true }).catch(() => {});
      throw err;
    }
    this.current = { segment, bytes: Buffer.byteLength(text) };
    this.segments.push(segment);
  }

  /**
   * The oldest segment's records, and a function that removes it once they
   * are stored. Appends go to a new segment from here on, so none lands in
   * one being replayed. A line that does not parse (a write cut by a crash)
   * is left out.
   */
  async takeOldest(): Promise<{ records: UsageRecord[]; done: () => Promise<void> } | null> {
    // Another gateway on this directory (and database) may still be appending to its own: those wait for it, or for its end.
    const segment = this.segments.find((s) => s.pid === process.pid || !isProcessAlive(s.pid));
    if (!segment) return null;
    if (this.current?.segment === segment) this.current = null;
    const text = await readFile(join(this.dir, segment.name), 'utf8').catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return '';
      throw err;
    });
    const records = text.split('\n').flatMap((line) => {
      const r = parseRecord(line);
      return r ? [r] : [];
    });
    return {
      records,
      done: async () => {
        await rm(join(this.dir, segment.name), { force: true });
        this.segments = this.segments.filter((s) => s !== segment);
      },
    };
  }
}

function parseRecord(line: string): UsageRecord | null {
  if (line.trim() === '') return null;
  try {
    const r = JSON.parse(line) as Omit<UsageRecord, 'createdAt'> & { createdAt: string };
    const createdAt = new Date(r.createdAt);
    if (typeof r.requestId !== 'string' || Number.isNaN(createdAt.getTime())) return null;
    return { ...r, createdAt };
  } catch {
    return null;
  }
}
