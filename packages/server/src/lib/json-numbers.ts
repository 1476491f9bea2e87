/**
 * Numbers of a JSON body that JSON.parse does not read as written: an integer past 2^53 becomes the nearest double
 * (9007199254740993 → 9007199254740992), which JSON then writes on rounded, and a number past a double's range becomes
 * ±Infinity, which JSON writes as null. A provider reads the client's text (Python keeps every integer exact), so a
 * body holding either is read again here, rarely: such numbers are found by a walk of the parsed value, which skips
 * the messages (no field of a message is a number) and costs about 0.15 µs, where a scan of the text cost 5-25 µs per
 * 20 KB (docs/decisions.md, numbers).
 */

declare global {
  interface JSON {
    /** A value JSON.stringify writes as the text given (ES2025's JSON.parse source text access; Node 21+). */
    rawJSON(text: string): { readonly rawJSON: string };
  }
}

/** 2^53: a double holds every integer below it. */
const EXACT = 2 ** 53;

/** Whether a number read from JSON may not be what was written: ±Infinity, or an integer past 2^53. */
function inexact(n: number): boolean {
  return !(n < EXACT && n > -EXACT);
}

/** Whether a parsed JSON body holds a number JSON.parse may not have read as written; a body's `messages` are not looked into. */
export function holdsInexactNumber(body: unknown): boolean {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return false;
  const root = body as Record<string, unknown>;
  for (const key in root) {
    if (key === 'messages') continue;
    const v = root[key];
    if (typeof v === 'object' ? v !== null && nestsInexact(v) : typeof v === 'number' && inexact(v)) return true;
  }
  return false;
}

function nestsInexact(value: object): boolean {
  if (Array.isArray(value)) {
    for (const v of value) if (typeof v === 'object' ? v !== null && nestsInexact(v) : typeof v === 'number' && inexact(v)) return true;
    return false;
  }
  const o = value as Record<string, unknown>;
  for (const key in o) {
    const v = o[key];
    if (typeof v === 'object' ? v !== null && nestsInexact(v) : typeof v === 'number' && inexact(v)) return true;
  }
  return false;
}

/** The path (`tools.0.function.parameters.maximum`) of the first number past a double's range, outside `messages`; null if none. */
export function infiniteNumberPath(body: Record<string, unknown>): string | null {
  for (const key in body)
    if (key !== 'messages') {
      const found = infiniteAt(body[key], key);
      if (found !== null) return found;
    }
  return null;
}

function infiniteAt(value: unknown, path: string): string | null {
  if (typeof value === 'number') return Number.isFinite(value) ? null : path;
  if (typeof value !== 'object' || value === null) return null;
  for (const key in value) {
    const found = infiniteAt((value as Record<string, unknown>)[key], `${path}.${key}`);
    if (found !== null) return found;
  }
  return null;
}

/** An integer past 2^53 as written in a body: its text, and the object (or array) and key it is the value of. */
export interface ExactInteger {
  holder: Record<string, unknown>;
  key: string;
  source: string;
}

/**
 * `text` parsed again (it parsed before: it is valid, without a prototype-poisoning key), with each integer past 2^53
 * it holds, as written. The body's values are still JSON's doubles, for its schema to check; a route that passes
 * them on writes them as their text (asWritten).
 */
export function withExactIntegers(text: string): { body: unknown; integers: ExactInteger[] | null } {
  const integers: ExactInteger[] = [];
  const body: unknown = JSON.parse(text, function (this: Record<string, unknown>, key, value, context?: { source?: string }) {
    const source = context?.source;
    if (typeof value === 'number' && !Number.isSafeInteger(value) && Number.isFinite(value) && source !== undefined && /^-?\d+$/.test(source)) {
      integers.push({ holder: this, key, source });
    }
    return value;
  });
  return { body, integers: integers.length > 0 ? integers : null };
}

/** A value JSON.stringify writes as `source`, where a route passes on an integer past 2^53 as its client wrote it. */
export function asWritten(source: string): number {
  return JSON.rawJSON(source) as unknown as number;
}
