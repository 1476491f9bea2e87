import { isUtf8 } from 'node:buffer';
import { once } from 'node:events';
import { createWriteStream, type WriteStream } from 'node:fs';
import { mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { finished } from 'node:stream/promises';
import { GatewayError } from '../errors/gateway-error.js';
import { outOfResources } from '../errors/out-of-resources.js';
import { isProcessAlive, processStartTime } from '../lib/process-alive.js';
import type { SpooledUpload } from '../providers/types.js';

/**
 * Who makes an upload folder, in its name: host, pid and the process's start time. A folder of this host whose
 * process no longer runs (its pid gone, or taken by a process started at another time) is swept at once, rather than
 * after the hours any request could last: a gateway that keeps being killed mid-upload does not pile uploads up.
 */
export function uploadOwnerTag(host = hostname(), pid = process.pid, started = processStartTime(pid)): string {
  return `${host.replace(/[^A-Za-z0-9_]/g, '_')}.${pid}.${started ?? 'x'}`;
}

const OWN_TAG = uploadOwnerTag();
const TAGGED = /^gw-upload-([A-Za-z0-9_]+)\.(\d+)\.(\d+|x)-/;

/** Whether a folder's name says it was made on this host by a process that no longer runs. */
function ownerGone(name: string, ownTag: string): boolean {
  const m = TAGGED.exec(name);
  if (!m) return false;
  const [, host, pidText, started] = m as unknown as [string, string, string, string];
  if (host !== ownTag.slice(0, ownTag.indexOf('.')) || `${host}.${pidText}.${started}` === ownTag) return false;
  const pid = Number(pidText);
  if (!isProcessAlive(pid)) return true;
  return started !== 'x' && processStartTime(pid) !== started;
}

export interface FormLimits {
  /** Largest file part, bytes. */
  fileBytes: number;
  /** Largest text field, bytes. */
  fieldBytes: number;
  /** Most text fields. */
  fields: number;
}

export interface ParsedForm {
  /** Text fields in order; a repeated name keeps every value. */
  fields: [string, string][];
  file: SpooledUpload | null;
}

/**
 * The on-disk home of one request's upload: a `gw-upload-*` folder,
 * removed by `dispose` (idempotent; a folder created after it is removed
 * at once), or once every holder has released it, so the spool never
 * outlives its request.
 */
export class UploadSpool {
  private dir: string | null = null;
  private disposed = false;
  /** Its connection, until it closes; and a request that outlives its client, until its calls are over. */
  private holders = 1;
  file: SpooledUpload | null = null;

  constructor(private readonly root: string) {}

  async newFile(): Promise<string> {
    if (this.disposed) throw new GatewayError('validation', 'The request ended before its upload was read.');
    const dir = await mkdtemp(join(this.root, `gw-upload-${OWN_TAG}-`));
    this.dir = dir;
    if (this.disposed) {
      await rm(dir, { recursive: true, force: true });
      throw new GatewayError('validation', 'The request ended before its upload was read.');
    }
    return join(dir, 'upload');
  }

  /**
   * Keeps the upload past its connection's close, until {@link release}d: a request that outlives its client reads it
   * again on a failover. False when it is gone already (its client left before).
   */
  hold(): boolean {
    if (this.disposed) return false;
    this.holders++;
    return true;
  }

  /** One holder is done with the upload (its connection closed, or its request's calls are over); the last removes it. */
  release(): Promise<void> {
    this.holders--;
    return this.holders > 0 ? Promise.resolve() : this.dispose();
  }

  async dispose(): Promise<void> {
    this.disposed = true;
    this.file = null;
    const dir = this.dir;
    this.dir = null;
    if (dir) await rm(dir, { recursive: true, force: true });
  }
}

/**
 * Removes the upload folders that outlived every request that could own them: what an instance killed in the middle
 * of an upload (SIGKILL, out of memory) left behind. A folder this host's process made goes as soon as that process
 * is gone ({@link uploadOwnerTag}). Instances of other hosts may share the folder, so any other goes only once neither
 * it nor its file has changed for `olderThanMs`, longer than any request lasts. Returns how many went.
 */
export async function sweepStaleUploads(root: string, olderThanMs: number, now = Date.now(), ownTag = OWN_TAG): Promise<number> {
  const names = await readdir(root).catch(() => [] as string[]);
  let removed = 0;
  for (const name of names) {
    if (!name.startsWith('gw-upload-')) continue;
    const dir = join(root, name);
    try {
      if (!ownerGone(name, ownTag)) {
        const [folder, file] = await Promise.all([stat(dir), stat(join(dir, 'upload')).catch(() => null)]);
        if (now - Math.max(folder.mtimeMs, file?.mtimeMs ?? 0) < olderThanMs) continue;
      }
      await rm(dir, { recursive: true, force: true });
      removed++;
    } catch {
      // Removed meanwhile by its request.
    }
  }
  return removed;
}

/** Sweeps once now and then every `everyMs` (each removal reported); returns what stops it. */
export function scheduleUploadSweep(root: string, olderThanMs: number, everyMs: number, onRemoved: (count: number) => void): () => void {
  const sweep = () =>
    void sweepStaleUploads(root, olderThanMs).then((n) => {
      if (n > 0) onRemoved(n);
    });
  sweep();
  const timer = setInterval(sweep, everyMs);
  timer.unref();
  return () => clearInterval(timer);
}

/** A request whose body is a form upload (multipart), by its Content-Type. */
export function isMultipart(contentType: string | string[] | undefined): boolean {
  return typeof contentType === 'string' && contentType.toLowerCase().startsWith('multipart/');
}

/**
 * A form's boundary: the whole parameter value, 1 to 70 characters as RFC 2046 bounds it (a space only inside quotes,
 * never last). A longer one is no boundary (null, the route's 415): cut to 70, it never matched the body's delimiters
 * and the form failed as malformed, its closing boundary "missing". Characters outside RFC 2046's set are taken, as
 * the delimiters are matched exactly: a client whose boundary has one still has its form read.
 */
const BOUNDARY = /;\s*boundary=(?:"([^"\p{Cc}]{0,69}[^"\s\p{Cc}])"|([^";\s\p{Cc}]{1,70}))\s*(?:;|$)/iu;

export function boundaryOf(contentType: string | undefined): string | null {
  const m = BOUNDARY.exec(contentType ?? '');
  return m ? (m[1] ?? m[2] ?? null) : null;
}

const CRLF2 = Buffer.from('\r\n\r\n');
const MAX_HEADER_BYTES = 16 * 1024;

interface Part {
  name: string;
  filename: string | null;
  contentType: string;
  chunks: Buffer[];
  size: number;
  out: WriteStream | null;
}

/**
 * A streaming multipart/form-data reader: text fields are kept (small and
 * capped), the one file part is written to the spool as it arrives with
 * the stream's backpressure, so memory stays flat whatever the upload's
 * size. Past `fileBytes` it stops with 413; a malformed body is a 400.
 */
export async function readMultipart(
  source: AsyncIterable<Buffer>,
  boundary: string,
  spool: UploadSpool,
  limits: FormLimits,
  beforeFile?: FieldCheck,
): Promise<ParsedForm> {
  const parser = new FormParser(boundary, spool, limits, beforeFile);
  try {
    // Stopping early must not destroy the request: that resets the connection before the 413 is read.
    const chunks = source instanceof Readable ? source.iterator({ destroyOnReturn: false }) : source;
    for await (const chunk of chunks) await parser.feed(chunk as Buffer);
    return parser.result();
  } catch (err) {
    parser.abort();
    // A full disk or no descriptor left for the spool file: the instance's want, not the gateway's fault (a 500).
    throw outOfResources('keep the upload in GW_UPLOAD_DIR', err) ?? err;
  }
}

/**
 * Looks at a text field that came before the file part, and throws to refuse the form there: the rest of the
 * body (the file) is then not read, and the answer goes out with the connection closed after it.
 */
export type FieldCheck = (name: string, value: string) => void | Promise<void>;

class FormParser {
  private state: 'preamble' | 'after' | 'headers' | 'body' | 'done' = 'preamble';
  // A virtual CRLF in front, so the first boundary matches the same delimiter as the others.
  private buf: Buffer = Buffer.from('\r\n');
  private readonly delim: Buffer;
  private part: Part | null = null;
  private readonly form: ParsedForm = { fields: [], file: null };
  private writeError: Error | null = null;

  constructor(
    boundary: string,
    private readonly spool: UploadSpool,
    private readonly limits: FormLimits,
    private readonly beforeFile: FieldCheck | undefined,
  ) {
    this.delim = Buffer.from(`\r\n--${boundary}`);
  }

  async feed(chunk: Buffer): Promise<void> {
    this.buf = this.buf.length > 0 ? Buffer.concat([this.buf, chunk]) : chunk;
    while (await this.step()) {
      // Each step consumes what it can; false means it needs more bytes.
    }
  }

  private async step(): Promise<boolean> {
    switch (this.state) {
      case 'preamble':
      case 'body':
        return this.untilDelimiter();
      case 'after': {
        if (this.buf.length < 2) return false;
        const two = this.buf.toString('latin1', 0, 2);
        if (two === '--') {
          this.state = 'done';
          return false;
        }
        if (two !== '\r\n') throw malformed('a boundary is not followed by a line break');
        this.buf = this.buf.subarray(2);
        this.state = 'headers';
        return true;
      }
      case 'headers': {
        const end = this.buf.indexOf(CRLF2);
        // Whether it came in one piece or several: the same form is not refused or taken by how the network cut it.
        if (end > MAX_HEADER_BYTES || (end < 0 && this.buf.length > MAX_HEADER_BYTES)) throw malformed('a part header is too long');
        if (end < 0) return false;
        await this.startPart(this.buf.toString('utf8', 0, end));
        this.buf = this.buf.subarray(end + 4);
        this.state = 'body';
        return true;
      }
      case 'done':
        this.buf = Buffer.alloc(0);
        return false;
    }
  }

  /** Passes on the bytes before the next delimiter (all but a possible partial delimiter at the end). */
  private async untilDelimiter(): Promise<boolean> {
    const at = this.buf.indexOf(this.delim);
    if (at < 0) {
      const safe = this.buf.length - (this.delim.length - 1);
      if (safe > 0) {
        if (this.state === 'body') await this.data(this.buf.subarray(0, safe));
        this.buf = this.buf.subarray(safe);
      }
      return false;
    }
    if (this.state === 'body') {
      await this.data(this.buf.subarray(0, at));
      await this.endPart();
    }
    this.buf = this.buf.subarray(at + this.delim.length);
    this.state = 'after';
    return true;
  }

  private async startPart(rawHeaders: string): Promise<void> {
    const disposition = /^content-disposition:\s*form-data(.*)$/im.exec(rawHeaders)?.[1] ?? null;
    const params = dispositionParams(disposition ?? '');
    const name = disposition === null ? undefined : params.get('name');
    if (name === undefined) throw malformed('a part has no form-data name');
    const declaredType = /^content-type:\s*(.+)$/im.exec(rawHeaders)?.[1]?.trim();
    const contentType = declaredType ?? 'application/octet-stream';
    // A 'file' part with a content type of its own but no name (httpx's `(None, bytes, 'audio/wav')`) is still the file.
    const unnamedFile = name === 'file' && declaredType !== undefined && !/^text\/plain\b/i.test(declaredType);
    const filename = params.get('filename') ?? extendedFilename(params.get('filename*')) ?? (unnamedFile ? 'upload' : null);
    this.part = { name, filename, contentType, chunks: [], size: 0, out: null };
    if (filename === null) {
      if (this.form.fields.length >= this.limits.fields) throw new GatewayError('validation', `The form has more than ${this.limits.fields} fields.`);
      return;
    }
    if (name !== 'file' || this.form.file !== null)
      throw new GatewayError('validation', `Unexpected file part '${name}': send one audio file as 'file'.`, { param: name });
    const out = createWriteStream(await this.spool.newFile(), { flags: 'wx' });
    // A write failing after an abort must not become an uncaught 'error'; it is rethrown on the next write instead.
    out.on('error', (err) => {
      this.writeError ??= err;
    });
    this.part.out = out;
  }

  private async data(bytes: Buffer): Promise<void> {
    const part = this.part;
    if (!part || bytes.length === 0) return;
    part.size += bytes.length;
    if (part.out) {
      if (this.writeError) throw this.writeError;
      if (part.size > this.limits.fileBytes) throw tooLarge(this.limits.fileBytes);
      if (!part.out.write(bytes)) await once(part.out, 'drain');
      return;
    }
    if (part.size > this.limits.fieldBytes) {
      if (part.name === 'file') throw fileAsTextField();
      throw new GatewayError('validation', `The form field '${part.name}' is longer than ${this.limits.fieldBytes} bytes.`, { param: part.name });
    }
    part.chunks.push(bytes);
  }

  private async endPart(): Promise<void> {
    const part = this.part;
    this.part = null;
    if (!part) return;
    if (!part.out) {
      const bytes = Buffer.concat(part.chunks);
      // Decoded as it is, a field in Latin-1 (curl -F from a Latin-1 terminal) would reach the model with U+FFFD in
      // place of its accents, where a JSON body of such bytes is refused.
      if (!isUtf8(bytes)) throw part.name === 'file' ? fileAsTextField() : notUtf8Field(part.name);
      const value = bytes.toString('utf8');
      // Looked at only before the file, and only a field's first value: a second is the form's error (sent more
      // than once), told once the form is read.
      const check = this.beforeFile !== undefined && this.form.file === null && !this.form.fields.some(([name]) => name === part.name);
      this.form.fields.push([part.name, value]);
      if (check) await this.beforeFile?.(part.name, value);
      return;
    }
    const out = part.out;
    out.end();
    await finished(out);
    this.form.file = { path: String(out.path), size: part.size, filename: part.filename ?? 'upload', contentType: part.contentType };
    this.spool.file = this.form.file;
  }

  result(): ParsedForm {
    if (this.state !== 'done') throw malformed('the body ended before its closing boundary');
    return this.form;
  }

  abort(): void {
    this.part?.out?.destroy();
    this.part = null;
  }
}

/**
 * The Content-Disposition parameters in order, each value quoted or a bare token (RFC 2183; busboy and multer read
 * both, and some clients send tokens). Read one after the other, so that a quoted value holding `;name=` or
 * `; filename=` (a file named `take;name=2.wav`) is that value, not another parameter.
 */
function dispositionParams(disposition: string): Map<string, string> {
  const params = new Map<string, string>();
  for (const m of disposition.matchAll(/;\s*([^\s=;]+)\s*=\s*(?:"([^"]*)"|([^;\s"]*))/g)) {
    const key = (m[1] as string).toLowerCase();
    if (!params.has(key)) params.set(key, m[2] ?? m[3] ?? '');
  }
  return params;
}

function notUtf8Field(name: string): GatewayError {
  return new GatewayError('validation', `The form field '${name}' is not valid UTF-8: send the form's text fields in UTF-8, with no other encoding.`, {
    param: name,
  });
}

/** `filename*=UTF-8''%C3%BC.wav` (RFC 5987), sent alone by some clients for a non-ASCII name: still a file part. */
function extendedFilename(value: string | undefined): string | null {
  const m = value === undefined ? null : /^[\w-]*'[^']*'(.+)$/.exec(value);
  if (!m) return null;
  try {
    return decodeURIComponent(m[1] ?? '');
  } catch {
    return 'upload';
  }
}

function malformed(why: string): GatewayError {
  return new GatewayError('validation', `The multipart/form-data body is malformed: ${why}.`);
}

/** Room for the text fields and part headers around an upload's file. */
export const FORM_SLACK_BYTES = 256 * 1024;

/** Whether a form body declared `contentLength` bytes long must hold a file over `fileLimit` (the fields get their room). */
export function declaredTooLarge(contentLength: number, fileLimit: number): boolean {
  return Number.isFinite(contentLength) && contentLength > fileLimit + FORM_SLACK_BYTES;
}

/**
 * A `file` part with neither a filename nor a content type is a text field (`curl -F file=<a.wav`, Python's
 * `requests.post(data=…)`): told how to send the audio as a file, rather than that a field is too long or not a file.
 */
export function fileAsTextField(): GatewayError {
  return new GatewayError(
    'validation',
    "Invalid body: 'file' came as a text field (a part with no filename); send the audio as a file part with a filename, as curl -F file=@audio.wav does.",
    { param: 'file' },
  );
}

export function tooLarge(limit: number): GatewayError {
  return new GatewayError('payload_too_large', `The upload is larger than this gateway accepts (${limit} bytes).`, { param: 'file' });
}
