import { randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { Readable } from 'node:stream';
import type { SpooledUpload } from './types.js';

export interface MultipartBody {
  body: Readable;
  headers: Record<string, string>;
}

/**
 * A multipart/form-data body for an upstream upload: the text fields, then
 * the spooled file streamed from disk (last, as Cohere's compat API needs),
 * with an exact Content-Length. Built per attempt, so failover re-reads the
 * file from its start.
 */
export function multipartBody(fields: [string, string][], file: SpooledUpload, fileField = 'file'): MultipartBody {
  const boundary = `gw-${randomBytes(12).toString('hex')}`;
  const head = Buffer.from(
    fields.map(([name, value]) => `--${boundary}\r\nContent-Disposition: form-data; name="${quote(name)}"\r\n\r\n${value}\r\n`).join('') +
      `--${boundary}\r\nContent-Disposition: form-data; name="${quote(fileField)}"; filename="${quote(file.filename)}"\r\n` +
      `Content-Type: ${file.contentType.replace(/[\r\n]/g, '')}\r\n\r\n`,
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  async function* parts(): AsyncGenerator<Buffer> {
    yield head;
    for await (const chunk of createReadStream(file.path)) yield chunk as Buffer;
    yield tail;
  }
  return {
    body: Readable.from(parts(), { objectMode: false }),
    headers: { 'content-type': `multipart/form-data; boundary=${boundary}`, 'content-length': String(head.length + file.size + tail.length) },
  };
}

/** Form field names and file names are quoted; a quote or line break in them would break the part header. */
function quote(s: string): string {
  return s.replace(/["\r\n]/g, (c) => encodeURIComponent(c));
}
