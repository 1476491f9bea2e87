import { randomBytes } from 'node:crypto';

/** A short random id with a readable prefix, e.g. `key_3J9x…`. */
export function newId(prefix: string): string {
  return `${prefix}_${randomBytes(12).toString('base64url')}`;
}

// Request ids come from a block of random bytes drawn 256 ids at a time:
// one randomBytes call per request was a measurable share of a request's CPU.
const RANDOM_BYTES = 8;
const POOL_IDS = 256;
let pool = Buffer.alloc(0);
let offset = 0;

/**
 * Request ids are always ours: a client-chosen id could collide in the usage table. They start with the time
 * (milliseconds, 12 hex digits, as a UUIDv7 does) and end with 64 random bits: the usage table's primary key then
 * grows at its end. Wholly random ids were written all over the key's index, whose pages left the embedded
 * database's small buffer cache as the table grew: its thread's CPU per row rose from 21 to 47 µs over 300,000 rows,
 * where time-ordered ids stay at 14-16 (bench/usage-rows.mjs; docs/decisions.md).
 */
export function newRequestId(): string {
  if (offset + RANDOM_BYTES > pool.length) {
    pool = randomBytes(RANDOM_BYTES * POOL_IDS);
    offset = 0;
  }
  const id = pool.toString('hex', offset, offset + RANDOM_BYTES);
  offset += RANDOM_BYTES;
  return `req_${Date.now().toString(16).padStart(12, '0')}${id}`;
}
