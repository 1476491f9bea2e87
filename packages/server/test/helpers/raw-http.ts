import { spawn } from 'node:child_process';
import { connect } from 'node:net';

/**
 * Writes `text` on a fresh connection to 127.0.0.1:`port` and reads all that comes back until the connection
 * closes, or until `giveUpMs` (an answer that never comes shows as what arrived by then).
 */
export function exchange(port: number, text: string | Buffer, giveUpMs = 10_000): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    let out = '';
    socket.on('data', (d) => {
      out += String(d);
    });
    socket.on('error', () => {});
    socket.on('close', () => resolve(out));
    setTimeout(() => socket.destroy(), giveUpMs).unref();
    socket.write(text);
  });
}

/**
 * Sends `head`, then `bodyBytes` bytes of filler as an uploader does (64 KiB at a time, as fast as the connection
 * takes them), from a process of its own, and gives back what it read until the connection closed (a reset as
 * `[EPIPE]` or `[ECONNRESET]` after whatever was read before it; a client that meets one loses the answer).
 * In a process of its own, as a real client: in this one, the client shares the gateway's event loop and its
 * writes are done before the gateway answers.
 */
export function uploadFromOwnProcess(port: number, head: string, bodyBytes: number): Promise<string> {
  const client = `
    const socket = require('node:net').connect(${port}, '127.0.0.1');
    let out = '';
    let left = ${bodyBytes};
    const chunk = Buffer.alloc(65536, 'a');
    socket.on('data', (d) => { out += d; });
    socket.on('error', (e) => { out += '[' + e.code + ']'; });
    socket.on('close', () => process.stdout.write(out));
    const send = () => {
      while (left > 0) {
        const part = left >= chunk.length ? chunk : chunk.subarray(0, left);
        left -= part.length;
        if (!socket.write(part)) return socket.once('drain', send);
      }
      socket.end();
    };
    socket.write(process.env.HEAD);
    send();
    setTimeout(() => socket.destroy(), 10000).unref();`;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['-e', client], { env: { HEAD: head }, stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
    });
    child.once('error', reject);
    child.once('exit', () => resolve(out));
  });
}

/**
 * Starts an upload of 10 MB (under the upload limit) to `path` with `apiKey`, sends 1 KB of it and no more, and
 * resolves with the answer's head: only a refusal before the body is read can answer it (rejects after 3 s).
 */
export function headBeforeUpload(port: number, path: string, apiKey: string): Promise<string> {
  return answerBeforeUpload(port, path, apiKey, '--b\r\n', (out) => out.includes('\r\n\r\n'));
}

/**
 * As {@link headBeforeUpload}, the form (boundary `b`) opening with `formStart` (text fields, the file part's
 * header) before its 1 KB: resolves with what was read once `done` says it is enough, by default when the gateway ends the
 * connection after its whole answer.
 */
export function answerBeforeUpload(port: number, path: string, apiKey: string, formStart: string, done?: (out: string) => boolean): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let out = '';
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no answer before the body: ${JSON.stringify(out)}`));
    }, 3000);
    const end = () => {
      clearTimeout(timer);
      socket.destroy();
      resolve(out);
    };
    socket.on('data', (d) => {
      out += String(d);
      if (done?.(out)) end();
    });
    socket.on('end', end);
    socket.on('error', () => {});
    socket.write(
      `POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${apiKey}\r\n` +
        `Content-Type: multipart/form-data; boundary=b\r\nContent-Length: ${10 * 2 ** 20}\r\n\r\n${formStart}${'x'.repeat(1024)}`,
    );
  });
}
