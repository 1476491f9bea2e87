import { randomBytes } from 'node:crypto';

/** A short random id with a readable prefix, e.g. `key_3J9x…`. */
export function newId(prefix: string): string {
  return `${prefix}_${randomBytes(12).toString('base64url')}`;
}

/** Request ids are always ours: a client-chosen id could collide in the usage table. */
export function newRequestId(): string {
  return `req_${randomBytes(12).toString('hex')}`;
}
