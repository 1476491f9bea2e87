import { statfsSync } from 'node:fs';

/**
 * What the embedded database needs free to open: a new write-ahead log segment is 16 MB, and PostgreSQL makes one
 * at start when the last is full. Below this, an open that fails is most likely the disk, which PGlite's own error
 * ("failed to initialize properly") does not say.
 */
export const EMBEDDED_ROOM_BYTES = 64 * 2 ** 20;

/** The bytes free to this process on the filesystem of `dir`; null where that cannot be read. */
export function freeBytes(dir: string): number | null {
  try {
    const s = statfsSync(dir);
    return s.bavail * s.bsize;
  } catch {
    return null;
  }
}

/** A sentence for an error about `dir` when its disk has less than `needed` bytes free; '' otherwise. */
export function lowDiskHint(dir: string, free: number | null, needed = EMBEDDED_ROOM_BYTES): string {
  if (free === null || free >= needed) return '';
  return ` Its disk has only ${(free / 2 ** 20).toFixed(1)} MB free; the embedded database needs about ${Math.round(needed / 2 ** 20)} MB to open (a new 16 MB log file): free some space in ${dir}.`;
}
