import { randomBytes } from 'node:crypto';

/** A short random id with a readable prefix, e.g. `key_3J9x…`. */
export function newId(prefix: string): string {
  return `${prefix}_${randomBytes(12).toString('base64url')}`;
}

// Request ids come from a block of random bytes drawn 256 ids at a time:
// one randomBytes call per request was a measurable share of a request's CPU.
const ID_BYTES = 12;
const POOL_IDS = 256;
let pool = Buffer.alloc(0);
let offset = 0;

/** Request ids are always ours: a client-chosen id could collide in the usage table. */
export function newRequestId(): string {
  if (offset + ID_BYTES > pool.length) {
    pool = randomBytes(ID_BYTES * POOL_IDS);
    offset = 0;
  }
  const id = pool.toString('hex', offset, offset + ID_BYTES);
  offset += ID_BYTES;
  return `req_${id}`;
}
