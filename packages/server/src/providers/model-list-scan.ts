import { UpstreamError } from '../errors/upstream-error.js';

/**
 * A model list (`{ data: [{ id, aliases?, … }, …] }`) read as its bytes arrive, keeping only the ids: an aggregator's
 * list of 120,000 entries is ~50 MB of JSON, which parsed whole held the event loop for hundreds of milliseconds and
 * built an object graph the gateway never reads. Each network read is scanned as it arrives (UpstreamHttp.scan bounds
 * how much one turn of the event loop scans), and nothing but the ids is kept.
 */

/** The most entries a provider's model list may have: past it the list is refused (the last one kept), read no further. */
export const MAX_LISTED_MODELS = 200_000;
/** The longest id kept (bytes): a longer one is no model name, and would only take memory. */
const MAX_ID_BYTES = 1024;
/** The most id text a list may have (characters), past which it is refused as one too long: memory a list takes is bounded. */
export const MAX_LISTED_ID_CHARS = 32 * 1024 * 1024;
/** UTF-8's byte order mark. */
const BOM = [0xef, 0xbb, 0xbf];
/** Deeper than this the answer is no model list. */
const MAX_DEPTH = 256;

/** What a scan found: the ids (and aliases) of `data`'s entries, how many entries it has, or why it is no list. */
export type ScannedList = { ok: true; ids: string[]; entries: number } | { ok: false; why: 'no data array' | 'too many' };

enum Mode {
  Value,
  /** After `[`: a value or `]`. */
  ValueOrClose,
  /** After `{`: a key or `}`. */
  KeyOrClose,
  Key,
  Colon,
  After,
  Str,
  Bare,
  Done,
}

const OBJ = 1;
const ARR = 2;
/** Where the string being read goes. */
enum Keep {
  None,
  Key,
  Id,
  Alias,
}

export class ModelListScan {
  private mode = Mode.Value;
  private readonly stack = new Uint8Array(MAX_DEPTH);
  private depth = 0;
  private broken = false;
  private tooMany = false;
  /** Inside the root's `data` array (its last `data`, as JSON.parse keeps the last). */
  private inData = false;
  private dataSeen = false;
  private entries = 0;
  private ids: string[] = [];
  private idChars = 0;
  private readonly seen: Set<string> | null;
  /** The key just read in the root object (depth 1) or in an entry (depth 3). */
  private key = '';
  /** The entry's `id` (its last, as JSON.parse keeps), added when the entry closes. */
  private entryId: string | null = null;
  private inAliases = false;
  /** The entry's aliases, added after its id (as Mistral lists them). */
  private entryAliases: string[] = [];
  private keep = Keep.None;
  private escaped = false;
  private hasEscape = false;
  private parts: Buffer[] = [];
  private partBytes = 0;
  /** A key's bytes, or a number's or literal's: only short ones can be what the scan looks for. */
  private readonly scratch = new Uint8Array(SCRATCH);
  private scratchLen = 0;
  /** A kept string read whole from one chunk. */
  private whole: string | null = null;
  /** The bytes being taken end the string. */
  private ending = false;
  /** The string being read is a key. */
  private isKey = false;

  /** Bytes of a leading byte order mark matched so far; -1 once the list's first bytes are past. */
  private bomMatched = 0;

  /** `aliases`: each entry's `aliases` strings are ids too (Mistral), and an id is kept once. */
  constructor(aliases = false) {
    this.seen = aliases ? new Set() : null;
  }

  /**
   * Where the list begins in `chunk` past a UTF-8 byte order mark some Windows-hosted proxies write first (as the
   * whole-answer reader takes it), which may come split across reads; -1 for a mark begun and not ended.
   */
  private pastBom(chunk: Buffer): number {
    let i = 0;
    while (i < chunk.length && this.bomMatched < 3 && chunk[i] === BOM[this.bomMatched]) {
      i++;
      this.bomMatched++;
    }
    if (this.bomMatched === 3 || i < chunk.length) {
      const broken = this.bomMatched > 0 && this.bomMatched < 3;
      this.bomMatched = -1;
      if (broken) return -1;
    }
    return i;
  }

  /** Scans the next bytes; false once the rest cannot change the outcome (the list is broken or too long). */
  write(chunk: Buffer): boolean {
    if (this.broken || this.tooMany) return false;
    const n = chunk.length;
    const from = this.bomMatched < 0 ? 0 : this.pastBom(chunk);
    if (from < 0) return this.fail();
    for (let i = from; i < n; i++) {
      if (this.mode === Mode.Str) {
        i = this.readString(chunk, i);
        if (this.broken) return false;
        continue;
      }
      const c = chunk[i] as number;
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) {
        if (this.mode === Mode.Bare && !this.endBare()) return this.fail();
        continue;
      }
      if (this.mode === Mode.Bare) {
        if (isBare(c)) {
          if (this.scratchLen === SCRATCH) return this.fail();
          this.scratch[this.scratchLen++] = c;
          continue;
        }
        if (!this.endBare()) return this.fail();
      }
      if (!this.step(c)) return this.fail();
      if (this.tooMany) return false;
    }
    return true;
  }

  /**
   * Reads a string from `i` by native searches for its closing quote (a description, kept or not, is not walked byte
   * by byte); the index of the last byte read: its closing quote, or the chunk's last.
   */
  private readString(chunk: Buffer, i: number): number {
    const n = chunk.length;
    let from = i;
    if (this.escaped) {
      this.escaped = false;
      from = i + 1;
    }
    for (;;) {
      const q = from < n ? chunk.indexOf(0x22, from) : -1;
      const to = q === -1 ? n : q;
      // A quote (or the chunk's end) after an odd run of backslashes is escaped.
      let k = to - 1;
      while (k >= from && chunk[k] === 0x5c) k--;
      const escaped = (to - 1 - k) % 2 === 1;
      if (q === -1 || !escaped) {
        if (this.keep !== Keep.None) {
          this.ending = q !== -1;
          this.take(chunk, i, to);
        }
        if (q === -1) {
          this.escaped = escaped;
          return n - 1;
        }
        this.endString();
        return q;
      }
      from = q + 1;
    }
  }

  /** The outcome, once every byte was written. */
  end(): ScannedList {
    if (this.tooMany) return { ok: false, why: 'too many' };
    if (this.mode === Mode.Bare && !this.endBare()) this.broken = true;
    if (this.broken || this.mode !== Mode.Done || !this.dataSeen) return { ok: false, why: 'no data array' };
    return { ok: true, ids: this.ids, entries: this.entries };
  }

  private fail(): false {
    this.broken = true;
    return false;
  }

  /** A byte outside a string and outside a number or literal. */
  private step(c: number): boolean {
    switch (this.mode) {
      case Mode.KeyOrClose:
        if (c === 0x7d) return this.close(OBJ);
        return this.openKey(c);
      case Mode.Key:
        return this.openKey(c);
      case Mode.Colon:
        if (c !== 0x3a) return false;
        this.mode = Mode.Value;
        return true;
      case Mode.After:
        if (c === 0x2c) {
          this.mode = this.stack[this.depth - 1] === OBJ ? Mode.Key : Mode.Value;
          return true;
        }
        return this.close(c === 0x7d ? OBJ : c === 0x5d ? ARR : 0);
      case Mode.ValueOrClose:
        if (c === 0x5d) return this.close(ARR);
        return this.value(c);
      case Mode.Value:
        return this.value(c);
      default:
        return false;
    }
  }

  private openKey(c: number): boolean {
    if (c !== 0x22) return false;
    this.openString(this.depth === 1 || (this.depth === 3 && this.inData) ? Keep.Key : Keep.None);
    this.isKey = true;
    return true;
  }

  /** The first byte of a value. */
  private value(c: number): boolean {
    const d = this.depth;
    const opens = c === 0x7b || c === 0x5b;
    if (d === 1 && this.key === 'data') {
      // A root `data` named again with another value: JSON.parse keeps the last.
      this.dataSeen = this.inData = c === 0x5b;
      this.ids = [];
      this.idChars = 0;
      this.seen?.clear();
      this.entries = 0;
    } else if (d === 2 && this.inData) {
      if (++this.entries > MAX_LISTED_MODELS) {
        this.tooMany = true;
        return true;
      }
      this.entryId = null;
      if (this.entryAliases.length > 0) this.entryAliases = [];
    } else if (d === 3 && this.inData && this.stack[2] === OBJ) {
      if (this.key === 'id') this.entryId = null;
      else if (this.key === 'aliases' && this.seen !== null) this.inAliases = c === 0x5b;
    }
    if (opens) {
      if (d >= MAX_DEPTH) return false;
      this.stack[d] = c === 0x7b ? OBJ : ARR;
      this.depth = d + 1;
      this.mode = c === 0x7b ? Mode.KeyOrClose : Mode.ValueOrClose;
      return true;
    }
    if (c === 0x22) {
      const inEntry = d === 3 && this.inData && this.stack[2] === OBJ;
      this.openString(inEntry && this.key === 'id' ? Keep.Id : d === 4 && this.inAliases ? Keep.Alias : Keep.None);
      this.isKey = false;
      return true;
    }
    if (!isBare(c)) return false;
    this.mode = Mode.Bare;
    this.scratch[0] = c;
    this.scratchLen = 1;
    return true;
  }

  private close(kind: number): boolean {
    const d = this.depth - 1;
    if (kind === 0 || d < 0 || this.stack[d] !== kind) return false;
    this.depth = d;
    if (d === 3 && this.inAliases) this.inAliases = false;
    else if (d === 2 && this.inData && kind === OBJ) {
      if (this.entryId !== null) this.add(this.entryId);
      for (const alias of this.entryAliases) this.add(alias);
      this.entryId = null;
      if (this.entryAliases.length > 0) this.entryAliases = [];
    } else if (d === 1 && this.inData) this.inData = false;
    this.afterValue();
    return true;
  }

  private afterValue(): void {
    this.mode = this.depth === 0 ? Mode.Done : Mode.After;
  }

  private endBare(): boolean {
    if (!this.is(TRUE) && !this.is(FALSE) && !this.is(NULL) && !isNumber(this.scratch, this.scratchLen)) return false;
    this.afterValue();
    return true;
  }

  private openString(keep: Keep): void {
    this.mode = Mode.Str;
    this.keep = keep;
    this.escaped = this.hasEscape = false;
    this.partBytes = 0;
  }

  /** Keeps a kept string's bytes `from`-`to` (bounded), noting escapes; a raw control byte is no JSON. */
  private take(chunk: Buffer, from: number, to: number): void {
    const at = this.partBytes;
    this.partBytes += to - from;
    if (this.partBytes > MAX_ID_BYTES) return;
    for (let k = from; k < to; k++) {
      const c = chunk[k] as number;
      if (c === 0x5c) this.hasEscape = true;
      else if (c < 0x20) this.broken = true;
    }
    // A string read in one piece (nearly every id) is made straight from the chunk, with no Buffer made for it.
    if (this.keep !== Keep.Key) {
      if (at === 0 && this.ending) this.whole = chunk.toString('utf8', from, to);
      else this.parts.push(chunk.subarray(from, to));
    }
    // Copied, not sliced: every entry has keys, and a Buffer made for each was most of the scan's time.
    else if (this.partBytes <= SCRATCH) for (let k = from; k < to; k++) this.scratch[at + k - from] = chunk[k] as number;
  }

  private endString(): void {
    const keep = this.keep;
    this.keep = Keep.None;
    if (this.isKey) {
      this.isKey = false;
      this.key = keep === Keep.Key ? this.keyText() : '';
      this.mode = Mode.Colon;
      return;
    }
    const text = keep === Keep.None || this.partBytes > MAX_ID_BYTES ? null : this.text();
    if (this.parts.length > 0) this.parts = [];
    this.whole = null;
    if (keep === Keep.Id) this.entryId = text;
    else if (keep === Keep.Alias && text !== null) this.entryAliases.push(text);
    this.afterValue();
  }

  /** The key just read if it is one the scan looks for, else ''. */
  private keyText(): string {
    if (this.partBytes > SCRATCH) return '';
    this.scratchLen = this.partBytes;
    if (!this.hasEscape) return this.is(DATA) ? 'data' : this.is(ID) ? 'id' : this.is(ALIASES) ? 'aliases' : '';
    try {
      return JSON.parse(`"${Buffer.from(this.scratch.subarray(0, this.scratchLen)).toString('utf8')}"`) as string;
    } catch {
      this.broken = true;
      return '';
    }
  }

  /** The scratch holds exactly `word`'s bytes. */
  private is(word: Uint8Array): boolean {
    if (this.scratchLen !== word.length) return false;
    for (let k = 0; k < word.length; k++) if (this.scratch[k] !== word[k]) return false;
    return true;
  }

  /** The kept string's text; null for one whose escapes are no JSON's. */
  private text(): string | null {
    const raw = this.whole ?? Buffer.concat(this.parts).toString('utf8');
    if (!this.hasEscape) return raw;
    try {
      return JSON.parse(`"${raw}"`) as string;
    } catch {
      this.broken = true;
      return null;
    }
  }

  private add(id: string): void {
    this.idChars += id.length;
    if (this.idChars > MAX_LISTED_ID_CHARS) this.tooMany = true;
    if (this.seen === null) this.ids.push(id);
    else if (!this.seen.has(id)) {
      this.seen.add(id);
      this.ids.push(id);
    }
  }
}

const SCRATCH = 48;
const word = (w: string) => new Uint8Array(Buffer.from(w));
const [TRUE, FALSE, NULL, DATA, ID, ALIASES] = ['true', 'false', 'null', 'data', 'id', 'aliases'].map(word) as [
  Uint8Array,
  Uint8Array,
  Uint8Array,
  Uint8Array,
  Uint8Array,
  Uint8Array,
];

/** JSON's number grammar over the first `len` bytes. */
function isNumber(b: Uint8Array, len: number): boolean {
  let k = 0;
  const digits = () => {
    const from = k;
    while (k < len && (b[k] as number) >= 0x30 && (b[k] as number) <= 0x39) k++;
    return k > from;
  };
  if (b[k] === 0x2d) k++;
  if (b[k] === 0x30) k++;
  else if (!digits()) return false;
  if (k < len && b[k] === 0x2e) {
    k++;
    if (!digits()) return false;
  }
  if (k < len && (b[k] === 0x65 || b[k] === 0x45)) {
    k++;
    if (k < len && (b[k] === 0x2b || b[k] === 0x2d)) k++;
    if (!digits()) return false;
  }
  return k === len;
}

function isBare(c: number): boolean {
  return (c >= 0x30 && c <= 0x39) || c === 0x2d || c === 0x2b || c === 0x2e || (c >= 0x61 && c <= 0x7a) || c === 0x45;
}

/** Why a scanned list is refused, as the provider's fault (its last good list is kept). */
/**
 * A scanned list's ids, or the protocol error a list that is none makes: no data array, one too long, or entries none
 * of them a model with an id (a broken answer: the last good list is kept, not an empty catalogue).
 */
export function scannedIds(provider: string, list: ScannedList): string[] {
  if (!list.ok) {
    const message =
      list.why === 'too many'
        ? `${provider} models list has more than ${MAX_LISTED_MODELS} entries or ${MAX_LISTED_ID_CHARS / 1024 / 1024} MiB of ids, the most the gateway reads`
        : `${provider} models list has no data array`;
    throw new UpstreamError({ kind: 'protocol', provider, message });
  }
  if (list.ids.length === 0 && list.entries > 0)
    throw new UpstreamError({ kind: 'protocol', provider, message: `${provider} models list has entries but no model ids` });
  return list.ids;
}
