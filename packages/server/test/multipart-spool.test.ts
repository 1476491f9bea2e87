import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { GatewayError } from '../src/errors/gateway-error.js';
import { boundaryOf, readMultipart, sweepStaleUploads, UploadSpool, uploadOwnerTag } from '../src/http/multipart-spool.js';

const root = mkdtempSync(join(tmpdir(), 'gw-mp-test-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const limits = { fileBytes: 100_000, fieldBytes: 1000, fields: 10 };

async function* chunks(body: Buffer, size: number): AsyncGenerator<Buffer> {
  for (let i = 0; i < body.length; i += size) yield body.subarray(i, i + size);
}

function form(boundary: string, file: Buffer): Buffer {
  return Buffer.concat([
    Buffer.from(`preamble\r\n--${boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nopenai/whisper\r\n`),
    Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="timestamp_granularities[]"\r\n\r\nword\r\n`),
    Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="timestamp_granularities[]"\r\n\r\nsegment\r\n`),
    Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="a b.wav"\r\nContent-Type: audio/wav\r\n\r\n`),
    file,
    Buffer.from(`\r\n--${boundary}--\r\nepilogue`),
  ]);
}

describe('the streaming multipart reader', () => {
  it('reads fields and spools the file exactly, whatever the chunking (down to one byte), boundary look-alikes included', async () => {
    const boundary = 'XyZ123';
    const file = Buffer.concat([Buffer.from('RIFF\r\n--XyZ12\r\n-'), Buffer.alloc(3000, 9), Buffer.from('\r\n--XyZ1')]);
    for (const size of [1, 7, 64, 65_536]) {
      const spool = new UploadSpool(root);
      const parsed = await readMultipart(chunks(form(boundary, file), size), boundary, spool, limits);
      expect(parsed.fields).toEqual([
        ['model', 'openai/whisper'],
        ['timestamp_granularities[]', 'word'],
        ['timestamp_granularities[]', 'segment'],
      ]);
      expect(parsed.file).toMatchObject({ filename: 'a b.wav', contentType: 'audio/wav', size: file.length });
      expect(readFileSync(parsed.file?.path ?? '')).toEqual(file);
      await spool.dispose();
    }
    expect(readdirSync(root)).toEqual([]);
  });

  it('stops at the file limit with 413 while writes are in flight, without an uncaught stream error', async () => {
    const boundary = 'b';
    const spool = new UploadSpool(root);
    const big = form(boundary, Buffer.alloc(300_000, 1));
    const err = await readMultipart(chunks(big, 512), boundary, spool, limits).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(GatewayError);
    expect((err as GatewayError).code).toBe('payload_too_large');
    await new Promise((r) => setTimeout(r, 100));
    await spool.dispose();
    expect(readdirSync(root)).toEqual([]);
  });

  it('reads bare-token names and a lone RFC 5987 filename* as clients send them, the file still a file part', async () => {
    const heads = [
      ['form-data; name=model', 'form-data; name=file; filename=a.wav', 'a.wav'],
      ['form-data; name="model"', `form-data; name="file"; filename*=UTF-8''%C3%BC%20x.wav`, 'ü x.wav'],
      // A quoted value holding what looks like another parameter is one value, as the quotes say.
      ['form-data; name="model"', 'form-data; filename="take;name=2.wav"; name="file"', 'take;name=2.wav'],
      ['form-data; name="model; filename=x.wav"', 'form-data; name="file"; filename="a.wav"', 'a.wav', 'model; filename=x.wav'],
    ];
    for (const [model, file, filename, field = 'model'] of heads) {
      const body = `--b\r\nContent-Disposition: ${model}\r\n\r\nm\r\n--b\r\nContent-Disposition: ${file}\r\n\r\nRIFF\r\n--b--\r\n`;
      const spool = new UploadSpool(root);
      const parsed = await readMultipart(chunks(Buffer.from(body), 100), 'b', spool, limits);
      expect(parsed.fields).toEqual([[field, 'm']]);
      expect(parsed.file).toMatchObject({ filename, size: 4 });
      await spool.dispose();
    }
  });

  it('refuses malformed bodies, a second file and oversized fields with 400', async () => {
    const cases: [string, string][] = [
      ['--b\r\nContent-Disposition: form-data; name="model"\r\n\r\nx', 'closing boundary'],
      ['--b\r\nX-Nothing: 1\r\n\r\nx\r\n--b--', 'no form-data name'],
      ['--b\r\nContent-Disposition: form-data; name="audio"; filename="a"\r\n\r\nx\r\n--b--', "Unexpected file part 'audio'"],
      [`--b\r\nContent-Disposition: form-data; name="prompt"\r\n\r\n${'p'.repeat(2000)}\r\n--b--`, "'prompt' is longer"],
    ];
    for (const [body, message] of cases) {
      const spool = new UploadSpool(root);
      const err = (await readMultipart(chunks(Buffer.from(body), 100), 'b', spool, limits).catch((e: unknown) => e)) as GatewayError;
      expect(err.code, body).toBe('validation');
      expect(err.message, body).toContain(message);
      await spool.dispose();
    }
    expect(boundaryOf('multipart/form-data; boundary="a b"')).toBe('a b');
    expect(boundaryOf('application/json')).toBeNull();
    // RFC 2046's 1 to 70 characters, the parameter's whole value; a longer one is not cut to 70.
    const longest = 'b'.repeat(70);
    expect(boundaryOf(`multipart/form-data; boundary=${longest}`)).toBe(longest);
    expect(boundaryOf(`multipart/form-data; boundary="${longest}"; charset=utf-8`)).toBe(longest);
    expect(boundaryOf('multipart/form-data; boundary=a@b{c}')).toBe('a@b{c}');
    for (const declared of [`${longest}b`, `"${longest}b"`, '"a "', 'a b', '""', '']) {
      expect(boundaryOf(`multipart/form-data; boundary=${declared}`), declared).toBeNull();
    }
    expect(boundaryOf('multipart/form-data; xboundary=a')).toBeNull();
  });

  it('a spool disposed before its file exists leaves nothing behind', async () => {
    const spool = new UploadSpool(root);
    const pending = spool.newFile();
    await spool.dispose();
    await expect(pending).rejects.toBeInstanceOf(GatewayError);
    expect(readdirSync(root)).toEqual([]);
  });

  it('a held spool outlives its connection until its holder releases it; one gone already cannot be held', async () => {
    const spool = new UploadSpool(root);
    const path = await spool.newFile();
    writeFileSync(path, 'RIFF');
    expect(spool.hold()).toBe(true);
    // The connection closes: the request that held it still reads it.
    await spool.release();
    expect(readFileSync(path, 'utf8')).toBe('RIFF');
    await spool.release();
    expect(readdirSync(root)).toEqual([]);
    const gone = new UploadSpool(root);
    await gone.release();
    expect(gone.hold()).toBe(false);
  });
});

describe('sweeping upload folders no request can own any more', () => {
  it('removes a folder only once neither it nor its file changed for the given time', async () => {
    const dir = mkdtempSync(join(root, 'sweep-'));
    const hour = 3_600_000;
    const folder = (name: string, folderAge: number, fileAge: number | null) => {
      mkdirSync(join(dir, name));
      const now = Date.now();
      if (fileAge !== null) {
        writeFileSync(join(dir, name, 'upload'), 'x');
        utimesSync(join(dir, name, 'upload'), new Date(now - fileAge), new Date(now - fileAge));
      }
      utimesSync(join(dir, name), new Date(now - folderAge), new Date(now - folderAge));
    };
    folder('gw-upload-old', 2 * hour, 2 * hour);
    folder('gw-upload-empty', 2 * hour, null);
    // A file still being written keeps its folder, however old the folder.
    folder('gw-upload-writing', 2 * hour, 1000);
    folder('gw-upload-new', 1000, 1000);
    folder('someone-else', 2 * hour, 2 * hour);
    expect(await sweepStaleUploads(dir, hour)).toBe(2);
    expect(readdirSync(dir).sort()).toEqual(['gw-upload-new', 'gw-upload-writing', 'someone-else']);
    expect(await sweepStaleUploads(join(dir, 'missing'), hour)).toBe(0);
  });

  it("removes at once a folder this host's process made once that process is gone, and no other before its time", async () => {
    const dir = mkdtempSync(join(root, 'sweep-owner-'));
    const hour = 3_600_000;
    const own = uploadOwnerTag();
    const [host] = own.split('.') as [string];
    // A child that has exited: its pid runs no more (or, taken again, with another start time).
    const gone = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))']).stdout.toString();
    const names = [
      `gw-upload-${host}.${gone}.123-aaaaaa`,
      `gw-upload-${host}.${process.pid}.1-bbbbbb`,
      `gw-upload-${own}-cccccc`,
      `gw-upload-otherhost.${gone}.123-dddddd`,
      'gw-upload-untagged',
    ];
    for (const name of names) {
      mkdirSync(join(dir, name));
      writeFileSync(join(dir, name, 'upload'), 'x');
    }
    // Fresh, all of them: only those whose maker is known gone go (a dead pid; this pid from an earlier start).
    expect(await sweepStaleUploads(dir, hour)).toBe(2);
    expect(readdirSync(dir).sort()).toEqual([`gw-upload-${own}-cccccc`, `gw-upload-otherhost.${gone}.123-dddddd`, 'gw-upload-untagged'].sort());
    // And a new upload's folder carries this process's tag.
    const spool = new UploadSpool(dir);
    const file = await spool.newFile();
    expect(file).toContain(`gw-upload-${own}-`);
    await spool.dispose();
  });
});
