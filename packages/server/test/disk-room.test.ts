import { tmpdir } from 'node:os';
import { describe, expect, it } from 'vitest';
import { EMBEDDED_ROOM_BYTES, freeBytes, lowDiskHint } from '../src/lib/disk-room.js';

describe('the embedded database failing to open on a nearly full disk', () => {
  it('says the disk is the cause when it has less room than a start needs, and nothing otherwise', () => {
    const free = freeBytes(tmpdir());
    expect(free).toBeGreaterThan(0);
    expect(freeBytes('/no/such/dir')).toBeNull();
    expect(lowDiskHint('/data', 4 * 2 ** 20)).toBe(
      ' Its disk has only 4.0 MB free; the embedded database needs about 64 MB to open (a new 16 MB log file): free some space in /data.',
    );
    expect(lowDiskHint('/data', EMBEDDED_ROOM_BYTES)).toBe('');
    // A free size that cannot be read says nothing rather than guess.
    expect(lowDiskHint('/data', null)).toBe('');
  });
});
