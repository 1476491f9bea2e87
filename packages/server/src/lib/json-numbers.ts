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
 * Each integer past 2^53 that `text` (parsed as `body`) holds, as written; the body's values stay JSON's doubles, for
 * its schema to check, and a route that passes them on writes them as their text (asWritten). Where they all sit
 * directly in the body (a client's random 64-bit `seed` on every request) their text is found by their keys (about
 * 10 µs per 20 KB); else the text is parsed again (it parsed before: it is valid, without a prototype-poisoning key),
 * which costs about 6 parses.
 */
export function exactIntegers(text: string, body: Record<string, unknown>): { body: unknown; integers: ExactInteger[] | null } {
  return fieldsWrittenAs(text, body) ?? withSources(text);
}

/** The integers past 2^53 of `body`'s own fields, as written; null where one is deeper or its text is not told by its key. */
function fieldsWrittenAs(text: string, body: Record<string, unknown>): { body: unknown; integers: ExactInteger[] | null } | null {
  // A key written with an escape (`"se\u0065d"`) is not found as written: an escape of an ASCII character (not of
  // the accents `\u00e9` of a Python client's text) sends the body to the full read.
  if (escapesAscii(text)) return null;
  const integers: ExactInteger[] = [];
  for (const key in body) {
    if (key === 'messages') continue;
    const v = body[key];
    if (typeof v === 'object' && v !== null && nestsInexact(v)) return null;
    if (typeof v !== 'number' || Number.isSafeInteger(v) || !inexact(v)) continue;
    const source = writtenAs(text, key, v);
    if (source === null) return null;
    integers.push({ holder: body, key, source });
  }
  return { body, integers: integers.length > 0 ? integers : null };
}

/** Whether `text` holds a `\u00XX` escape of a printable ASCII character: found by its backslash, which is rare (a regex took 20 µs per 20 KB). */
function escapesAscii(text: string): boolean {
  for (let at = text.indexOf('\\u'); at !== -1; at = text.indexOf('\\u', at + 2)) {
    const c = text.charCodeAt(at + 4);
    if (text.charCodeAt(at + 2) === 0x30 && text.charCodeAt(at + 3) === 0x30 && c >= 0x32 && c <= 0x37) return true;
  }
  return false;
}

/** A key found by its text: one with other characters may be written escaped. */
const PLAIN_KEY = /^[\w-]+$/;

/**
 * The text of `key`'s integer, where every `"key": <integer>` of the body (at any depth: only a key is a quoted string
 * that a colon follows) that reads as `value` is written alike; null if none is (`1e300`) or they differ.
 */
function writtenAs(text: string, key: string, value: number): string | null {
  if (!PLAIN_KEY.test(key)) return null;
  // The key, its colon, and digits that no fraction or exponent follows (a regex finds them faster than indexOf).
  const after = new RegExp(`"${key}"\\s*:\\s*(-?\\d+)(?![\\d.eE])`, 'g');
  let found: string | null = null;
  for (let m = after.exec(text); m !== null; m = after.exec(text)) {
    const integer = m[1] as string;
    if (Number(integer) !== value) continue;
    if (found !== null && found !== integer) return null;
    found = integer;
  }
  return found;
}

/** `text` parsed again, with the source text of each value (ES2025's JSON.parse source text access). */
function withSources(text: string): { body: unknown; integers: ExactInteger[] | null } {
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
