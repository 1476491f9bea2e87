import type { IncomingMessage } from 'node:http';

const LINGER_MS = 3_000;
const LINGER_BYTES = 64 * 1024 * 1024;

/**
 * Closes a connection whose answer went out before its request's body
 * ended (a refused upload) the way nginx's lingering close does: send the
 * answer, shut our side, then read and drop what the client still sends
 * for a bounded time. Closing at once would make our kernel reset a
 * connection with unread data, and the client's kernel drops our answer
 * with it, so the client sees EPIPE/ECONNRESET instead of the 413.
 */
export function lingerOnClose(request: IncomingMessage): void {
  const socket = request.socket;
  if (!socket || socket.destroyed) return;
  // Node calls destroySoon() once the answer of a `connection: close` response is written.
  socket.destroySoon = () => {
    if (socket.writable) socket.end();
    let dropped = 0;
    const stop = () => socket.destroy();
    const timer = setTimeout(stop, LINGER_MS);
    timer.unref();
    socket.once('close', () => clearTimeout(timer));
    socket.once('end', stop);
    request.on('data', (chunk: Buffer) => {
      dropped += chunk.length;
      if (dropped > LINGER_BYTES) stop();
    });
    request.resume();
  };
}
