/** A buffered multipart/form-data parser (uploads are capped, so buffering is fine in a simulator). */

export interface UploadedFile {
  field: string;
  filename: string;
  contentType: string;
  data: Buffer;
}

export interface Multipart {
  /** Text fields; repeated names (e.g. `timestamp_granularities[]`) keep every value in order. */
  fields: Record<string, string[]>;
  files: UploadedFile[];
}

export function boundaryOf(contentType: string | undefined): string | null {
  if (!contentType || !/^multipart\/form-data/i.test(contentType)) return null;
  const m = /boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType);
  return m ? (m[1] ?? m[2] ?? null) : null;
}

/** Parse a complete body; returns null when it is not well-formed multipart. */
export function parseMultipart(body: Buffer, boundary: string): Multipart | null {
  const delimiter = Buffer.from(`--${boundary}`);
  const out: Multipart = { fields: {}, files: [] };
  let pos = body.indexOf(delimiter);
  if (pos < 0) return null;
  for (;;) {
    pos += delimiter.length;
    if (body[pos] === 0x2d && body[pos + 1] === 0x2d) return out; // closing "--"
    if (body[pos] === 0x0d && body[pos + 1] === 0x0a) pos += 2;
    const headerEnd = body.indexOf('\r\n\r\n', pos);
    if (headerEnd < 0) return null;
    const next = body.indexOf(Buffer.from(`\r\n--${boundary}`), headerEnd + 4);
    if (next < 0) return null;
    addPart(out, body.subarray(pos, headerEnd).toString('utf8'), body.subarray(headerEnd + 4, next));
    pos = next + 2;
  }
}

function addPart(out: Multipart, rawHeaders: string, data: Buffer): void {
  let name: string | undefined;
  let filename: string | undefined;
  let contentType = 'application/octet-stream';
  for (const line of rawHeaders.split('\r\n')) {
    const idx = line.indexOf(':');
    if (idx < 0) continue;
    const key = line.slice(0, idx).trim().toLowerCase();
    const value = line.slice(idx + 1).trim();
    if (key === 'content-disposition') {
      name = /\bname="([^"]*)"/i.exec(value)?.[1];
      filename = /\bfilename="([^"]*)"/i.exec(value)?.[1];
    } else if (key === 'content-type') contentType = value;
  }
  if (name === undefined) return;
  if (filename !== undefined) out.files.push({ field: name, filename, contentType, data: Buffer.from(data) });
  else {
    const values = out.fields[name] ?? [];
    values.push(data.toString('utf8'));
    out.fields[name] = values;
  }
}

/** Last value of a field (also accepting the `name[]` spelling). */
export function field(mp: Multipart, name: string): string | undefined {
  const values = mp.fields[name] ?? mp.fields[`${name}[]`];
  return values?.[values.length - 1];
}

/** Every value of a repeated field, `name[]` and `name` spellings together. */
export function fieldAll(mp: Multipart, name: string): string[] {
  return [...(mp.fields[`${name}[]`] ?? []), ...(mp.fields[name] ?? [])];
}

/** Summary for stats: fields plus file metadata, without the bytes. */
export function summarize(mp: Multipart): unknown {
  return {
    fields: mp.fields,
    files: mp.files.map((f) => ({ field: f.field, filename: f.filename, contentType: f.contentType, size: f.data.length })),
  };
}
