import { describe, expect, it } from 'vitest';
import { UnenforcedLog } from '../src/limits/unenforced-log.js';

describe('the log of requests let through unenforced', () => {
  it('keeps what is owed in order across ages, writes and compaction, and frees the rest', () => {
    const log = new UnenforcedLog();
    expect(log.empty).toBe(true);
    for (let i = 0; i < 3000; i++) log.push(i % 2 ? 'key_b' : 'key_a', 1000 + i, `req_${i}`);
    log.dropThrough(1000 + 1999);
    expect([log.first, log.end, log.keyIdAt(log.first), log.atAt(log.first), log.requestIdAt(log.first)]).toEqual([2000, 3000, 'key_a', 3000, 'req_2000']);
    // A write covers what was there when it began; what came meanwhile stays owed.
    const sent = log.end;
    log.push('key_c', 5000, 'req_late');
    log.writtenTo(sent);
    expect(log.empty).toBe(false);
    log.compact();
    expect([log.first, log.end, log.keyIdAt(log.first), log.requestIdAt(log.first)]).toEqual([0, 1, 'key_c', 'req_late']);
    log.writtenTo(log.end);
    expect(log.empty).toBe(true);
  });
});
