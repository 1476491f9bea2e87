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
