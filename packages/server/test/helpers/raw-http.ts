import { connect } from 'node:net';

/**
 * Writes `text` on a fresh connection to 127.0.0.1:`port` and reads all that comes back until the connection
 * closes, or until `giveUpMs` (an answer that never comes shows as what arrived by then).
 */
export function exchange(port: number, text: string, giveUpMs = 10_000): Promise<string> {
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
