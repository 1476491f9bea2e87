import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/**
 * The most requests one connection may have waiting for their answers. HTTP/1.1 lets a client send requests without
 * waiting (pipelining), and Node starts every one it has read at once: 128 KB of `GET` on each of 100 connections,
 * never read, was 330,000 requests queued ahead of every other client's (24 s for a /health). Clients that pipeline
 * keep a few in flight; one that goes past this has its connection closed.
 */
export const MAX_PIPELINED = 32;

const kWaiting = Symbol('gw.answersWaiting');
const kSocket = Symbol('gw.answerSocket');
type CountedSocket = Socket & { [kWaiting]?: number };
type TrackedResponse = ServerResponse & { [kSocket]?: CountedSocket };
type RequestListener = (req: IncomingMessage, res: ServerResponse) => void;

/** Puts the bound in front of the server's request listeners (Fastify's): a request past it is never started. */
export function limitPipelining(server: Server): void {
  const listeners = server.listeners('request') as RequestListener[];
  server.removeAllListeners('request');
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    const socket = req.socket as CountedSocket;
    // The rest of what was read when the connection was closed: Node still parses it into requests.
    if (socket.destroyed) return;
    const waiting = (socket[kWaiting] ?? 0) + 1;
    if (waiting > MAX_PIPELINED) {
      socket.destroy();
      return;
    }
    socket[kWaiting] = waiting;
    (res as TrackedResponse)[kSocket] = socket;
    res.on('close', answered);
    for (const listener of listeners) listener(req, res);
  });
}

function answered(this: TrackedResponse): void {
  const socket = this[kSocket];
  if (socket?.[kWaiting] !== undefined) socket[kWaiting]--;
}
