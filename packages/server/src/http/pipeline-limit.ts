import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { RawAnswers } from './raw-answers.js';

/**
 * The most requests one connection may have waiting for their answers. HTTP/1.1 lets a client send requests without
 * waiting (pipelining), and Node starts every one it has read at once: 128 KB of `GET` on each of 100 connections,
 * never read, was 330,000 requests queued ahead of every other client's (24 s for a /health). Clients that pipeline
 * keep a few in flight; one that goes past this has its connection closed.
 */
export const MAX_PIPELINED = 32;

const kQueued = Symbol('gw.answersQueued');
const kSocket = Symbol('gw.answerSocket');
/** Node's own: the response its connection is writing; a request that comes meanwhile has its response queued behind it. */
type CountedSocket = Socket & { [kQueued]?: number; _httpMessage?: ServerResponse | null };
type TrackedResponse = ServerResponse & { [kSocket]?: CountedSocket };
type RequestListener = (req: IncomingMessage, res: ServerResponse) => void;

/**
 * Puts the bound in front of the server's request listener (Fastify's): a request past it is never started. Only
 * answers queued behind another are counted, so a client that waits for each answer (nearly all) costs one
 * comparison per request.
 */
export function limitPipelining(server: Server, raw: RawAnswers): void {
  const listeners = server.listeners('request') as RequestListener[];
  server.removeAllListeners('request');
  const handle: RequestListener =
    listeners.length === 1
      ? (listeners[0] as RequestListener)
      : (req, res) => {
          for (const listener of listeners) listener(req, res);
        };
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    const socket = req.socket as CountedSocket;
    // Closed before the request came: the rest of what was read when the connection was closed (Node still parses it
    // into requests), or a request whose `Expect` checks outlasted its client. Its response has closed, or closes
    // before a listener the routes could add: not started, counted and logged here, else it is in neither.
    if (socket.destroyed) {
      raw.notStarted(req);
      return;
    }
    if (socket._httpMessage !== res) {
      const queued = (socket[kQueued] ?? 0) + 1;
      // The answer being written, and the queued ones.
      if (queued >= MAX_PIPELINED) {
        socket.destroy();
        raw.notStarted(req);
        return;
      }
      socket[kQueued] = queued;
      (res as TrackedResponse)[kSocket] = socket;
      res.on('close', answered);
    }
    handle(req, res);
  });
}

function answered(this: TrackedResponse): void {
  const socket = this[kSocket];
  if (socket?.[kQueued] !== undefined) socket[kQueued]--;
}
