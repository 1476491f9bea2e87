import type { Socket } from 'node:net';

/**
 * How long a draining instance keeps reading its kept-alive connections
 * before it closes the idle ones: a request a client had already sent on
 * one is answered 503 with connection: close, where closing it at once
 * reset that request (the client cannot tell whether a POST was run).
 */
export const DRAIN_READ_GRACE_MS = 200;

/**
 * For a stream that ended during the drain, its head sent with keep-alive before the drain began: its connection is
 * closed now, as after an answer that said connection: close. Left open, a client's pool sent its next request on it
 * (undici takes its oldest free connection, within milliseconds at a few tens of requests a second), each a 503 and a
 * retry a second later that could meet another such connection; closed, the pool opens a new one (another instance).
 */
export function closeAfterStream(socket: Socket | null): void {
  if (!socket || socket.destroyed) return;
  // One turn for a request pipelined behind the stream to take the connection: its 503 says connection: close.
  setImmediate(() => {
    if (!socket.destroyed && !(socket as Socket & { _httpMessage?: unknown })._httpMessage) socket.destroySoon();
  });
}
