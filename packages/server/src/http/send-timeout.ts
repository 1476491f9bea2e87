import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/**
 * What the connection has not yet handed to the kernel: Node's queue, and what is left of the write libuv is doing
 * (its handle's writeQueueSize, which goes down as the client takes bytes; writableLength counts that write whole).
 */
function unsent(socket: Socket): number {
  const handle = (socket as Socket & { _handle?: { writeQueueSize?: number } | null })._handle;
  return socket.writableLength + (handle?.writeQueueSize ?? 0);
}

/**
 * Closes the connection of an answer, written whole, that the client stops taking (as nginx's send_timeout): once
 * `res` has ended, the bytes still unsent must go down within every `timeoutMs`. A client that never reads would
 * otherwise hold the answer's memory (a 20 MB embeddings answer), its budget hold and its usage record (written
 * when the answer is) for as long as it keeps the connection open. Nothing is watched while the answer is being
 * made (a provider's wait is not the client's), nor for an answer the kernel took at once.
 */
export function closeWhenAnswerNotTaken(res: ServerResponse, timeoutMs: number, onCut: () => void): void {
  res.once('prefinish', () =>
    // After Node's uncork of the answer (next tick) and the write's completion when the kernel took it all.
    setImmediate(() => {
      const socket = res.socket;
      if (!socket || socket.destroyed || res.writableFinished) return;
      let left = unsent(socket);
      let progressAt = Date.now();
      const timer = setInterval(
        () => {
          if (socket.destroyed || res.writableFinished) return clearInterval(timer);
          const now = unsent(socket);
          if (now < left) {
            left = now;
            progressAt = Date.now();
          } else if (Date.now() - progressAt >= timeoutMs) {
            clearInterval(timer);
            onCut();
            socket.destroy();
          }
        },
        Math.max(100, Math.min(5_000, timeoutMs / 4)),
      );
      timer.unref();
      res.once('close', () => clearInterval(timer));
    }),
  );
}
