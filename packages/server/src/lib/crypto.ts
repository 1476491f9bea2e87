import { createHmac, hash, randomBytes, timingSafeEqual } from 'node:crypto';

/** One-shot `crypto.hash`: a third of the time of createHash().update().digest(), on every request's key. */
export function sha256Hex(input: string): string {
  return hash('sha256', input, 'hex');
}

export function hmacHex(secret: string, input: string): string {
  return createHmac('sha256', secret).update(input).digest('hex');
}

/** Compares two strings in time that depends only on their lengths' digests, not their contents. */
export function safeEqual(a: string, b: string): boolean {
  const da = hash('sha256', a, 'buffer');
  const db = hash('sha256', b, 'buffer');
  return timingSafeEqual(da, db);
}

export function randomToken(bytes: number): string {
  return randomBytes(bytes).toString('base64url');
}
