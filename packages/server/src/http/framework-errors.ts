import { type IncomingMessage, maxHeaderSize, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { H, type Variant } from '@gw/schema';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { GatewayError } from '../errors/gateway-error.js';
import { newRequestId } from '../lib/ids.js';
import { kGatewayRequest, type ResponseOfRequest } from './context.js';
import { errorEnvelope, sendError, toGatewayError } from './errors.js';
import type { RawAnswers } from './raw-answers.js';
import { serverTiming } from './server-timing.js';

/**
 * Under /alt (variant B's mount) even an unknown path answers in B's envelope, and so does one off only in letter
 * case or doubled slashes (`/ALT/V1/…`, `//alt/v1/…`), whose 404 names the /alt route meant. Called on errors only.
 */
export function variantOfUrl(url: string): Variant {
  if (url === '/alt' || url.startsWith('/alt/') || url.startsWith('/alt?')) return 'b';
  return MISSPELT_ALT.test(url) ? 'b' : 'a';
}

const MISSPELT_ALT = /^\/+alt(?:[/?]|$)/i;

/**
 * Errors Fastify meets before a route runs (a bad percent-escape, an overlong path parameter), in the
 * variant's envelope with a request id, like every other answer; Fastify's own is a bare
 * `{"error": "Bad Request"}` that SDKs cannot read. Fastify answers these without the routes' hooks, so `raw`
 * counts and logs them (under `unmatched`, with the id the client got): they were in neither.
 */
export function frameworkErrors(raw: RawAnswers): (err: FastifyError, request: FastifyRequest, reply: FastifyReply) => void {
  return (err, request, reply) => {
    const startedAt = performance.now();
    reply.header(H.requestId, request.id);
    const path = request.url.split('?')[0] ?? '';
    let error: GatewayError;
    if (err.code === 'FST_ERR_BAD_URL') error = new GatewayError('validation', `The path '${path}' has an invalid percent-escape.`);
    else if (err.code === 'FST_ERR_MAX_PARAM_LENGTH') error = new GatewayError('validation', 'A path parameter is longer than this gateway accepts.');
    else error = toGatewayError(err, request.headers, request.routeOptions.bodyLimit);
    const variant = variantOfUrl(request.url);
    sendError(error, request, reply, variant);
    raw.answered({ requestId: request.id, status: reply.statusCode, variant, startedAt, method: request.method, url: request.url });
  };
}

/**
 * What Node's HTTP parser refuses before there is a request (malformed or smuggling-shaped framing,
 * oversized headers, a request not sent in time): answered in variant A's envelope, since the path
 * may not be known, and the connection closed. `raw` counts and logs the answers no request object carries.
 */
export function clientErrorHandler(raw: RawAnswers): (err: NodeJS.ErrnoException, socket: Socket) => void {
  return (err, socket) => {
    if (err.code === 'ECONNRESET' || socket.destroyed) return;
    // Node's parser, once it has refused, refuses each later read again: the refusal is already waiting (below).
    if ((socket as RefusingSocket)[kRefusing]) return;
    // The client closed its side in the middle of a request (its body cut off): it gave up, and nobody reads an
    // answer. Closed unanswered, the request is counted and logged as a client that left (499), not as a 400.
    if (err.code === 'HPE_INVALID_EOF_STATE') {
      socket.destroy();
      return;
    }
    // A request whose head arrived (its body did not, in time) is named: its id, its variant, its status in the
    // metrics and the log. Before its head, the path is not known: variant A's envelope and a new id.
    const answering = (socket as RefusingSocket)._httpMessage;
    // Only the request still being read: with pipelining the connection's answer may be an earlier request's, read whole
    // and in its handler (a budget hold, an upstream call), while a later one's body is what ran out of time. Naming that
    // earlier one would skip its recording as a client gone (request-context.ts): its hold kept, no usage record.
    const named = answering?.[kGatewayRequest];
    // Bytes that follow a request read whole (its Content-Length short of its body, a malformed request pipelined
    // behind it) say nothing about that request: it, and any read whole after it, are answered first, then the refusal
    // and the close. Cut at once, a complete request lost its answer to a 400 about what came after it.
    const afterRequest = named?.raw.complete === true && err.code !== 'ERR_HTTP_REQUEST_TIMEOUT';
    const error =
      err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? new GatewayError('request_timeout', 'The request was not received in time (GW_REQUEST_TIMEOUT_MS); the connection is closed.')
        : err.code === 'HPE_HEADER_OVERFLOW'
          ? new GatewayError(
              'headers_too_large',
              `The request's head (its URL and headers together) is larger than this gateway accepts (${maxHeaderSize} bytes): a long query or a large header, such as a cookie.`,
            )
          : malformedRequest(err, afterRequest);
    if (afterRequest) {
      (socket as RefusingSocket)[kRefusing] = true;
      afterAnswers(socket as RefusingSocket, () => {
        const { status, body } = errorEnvelope(error, 'a');
        const startedAt = performance.now();
        const requestId = newRequestId();
        if (writeRawAnswer(socket, status, body, startedAt, requestId)) raw.answered({ requestId, status, variant: 'a', startedAt });
        socket.destroy();
      });
      return;
    }
    const request = named && !named.raw.complete ? named : undefined;
    const variant = request ? variantOfUrl(request.url) : 'a';
    const { status, body } = errorEnvelope(error, variant);
    // Only while no answer has begun on the connection (as Node's own handler): bytes after a streamed answer's
    // headers would land inside its body.
    if (!answering?.headersSent) {
      if (request) {
        // Counted and logged as it closes (request-context.ts); timed from its head, as its wait was (a 408 comes seconds after it).
        request.gw.answeredRaw = status;
        request.gw.variant = variant;
        request.gw.errorCode = error.code;
        writeRawAnswer(socket, status, body, request.gw.startedAt, request.id);
      } else {
        const startedAt = performance.now();
        const requestId = newRequestId();
        if (writeRawAnswer(socket, status, body, startedAt, requestId)) raw.answered({ requestId, status, variant, startedAt });
      }
    }
    socket.destroy();
  };
}

/**
 * What is wrong with a request Node's parser refused, in its words (they hold no request bytes). A header line
 * ending in a bare LF or CR is, in practice, a value with a line break in it: a key read from a file whole (an
 * environment variable filled from it, or a CRLF file, whose CR `$(cat key)` keeps), which curl sends as it is.
 * Said so, since such a client sees nothing wrong in its command.
 */
function malformedRequest(err: NodeJS.ErrnoException, afterRequest = false): GatewayError {
  if (err.code === 'HPE_CR_EXPECTED' || err.code === 'HPE_LF_EXPECTED') {
    return new GatewayError(
      'validation',
      'The request is not valid HTTP/1.1: a header line ends in a bare line break. A header value holds a line break (an API key read from a file with its trailing newline?): remove it.',
    );
  }
  // HTTP/2's connection preface (`PRI * HTTP/2.0`: h2c with prior knowledge, as a balancer or mesh sidecar set to speak
  // HTTP/2 to its backends sends it): Node's words are "Pause on PRI/Upgrade", which name no cause.
  if (err.code === 'HPE_PAUSED_H2_UPGRADE') {
    return new GatewayError(
      'validation',
      'HTTP/2 is not served: this gateway speaks HTTP/1.1 (and HTTP/1.0). A load balancer or proxy in front must send HTTP/1.1 to it.',
    );
  }
  const reason = (err as { reason?: unknown }).reason;
  const said = typeof reason === 'string' && reason !== '' ? `The request is not valid HTTP/1.1: ${reason}.` : 'The request is not valid HTTP/1.1.';
  // Most often a Content-Length counted in characters (a string's length) rather than in the bytes of its UTF-8.
  return new GatewayError(
    'validation',
    afterRequest
      ? `${said} These bytes came after a request read whole: if that request's Content-Length was missing or short of its body, send the body's length in bytes.`
      : said,
  );
}

const kRefusing = Symbol('gw.refusingAfterAnswers');
type RefusingSocket = Socket & { [kRefusing]?: true; _httpMessage?: (ServerResponse & ResponseOfRequest) | null };

/** Calls `then` once the connection has no answer left to write (each queued one takes its turn as the one before ends), unless it closed. */
function afterAnswers(socket: RefusingSocket, then: () => void): void {
  const answer = socket._httpMessage;
  if (socket.destroyed) return;
  if (!answer) {
    then();
    return;
  }
  // 'close' comes after Node has handed the connection to the next queued answer ('finish'), or when the connection closed.
  answer.once('close', () => afterAnswers(socket, then));
}

/** CONNECT (a tunnel): not something this gateway does; answered in the envelope, then the connection closed (Node would close it unanswered). */
export function refuseConnect(req: IncomingMessage, socket: Socket, raw: RawAnswers, allowOf: (path: string) => string[], startedAt = performance.now()): void {
  // Pipelined behind requests still being answered: the 405 and the close wait for their answers (Node assigns the
  // socket to the next queued one before the last one's 'close'), as every other refusal on a connection does.
  // Written at once, it came first, the client took it for its earlier request's answer, and that one was cut.
  const answering = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
  if (answering && !socket.destroyed) {
    answering.once('close', () => refuseConnect(req, socket, raw, allowOf, startedAt));
    return;
  }
  const requestId = newRequestId();
  const { body } = errorEnvelope(new GatewayError('validation', 'CONNECT is not supported: this is an HTTP API, not a proxy.'), 'a');
  // RFC 9110 15.5.6: a 405 says what the target allows. A host:port (a tunnel) allows nothing here, a path its routes' methods.
  const target = req.url ?? '';
  const allow = target.startsWith('/') ? allowOf(target.split('?')[0] ?? target) : [];
  if (writeRawAnswer(socket, 405, body, startedAt, requestId, `allow: ${allow.join(', ')}\r\n`))
    raw.answered({ requestId, status: 405, variant: 'a', startedAt, method: req.method, url: req.url });
  socket.destroy();
}

/** An error answer written straight to a socket that has no request object (yet): the headers every answer carries, then close. False if it could not be. */
function writeRawAnswer(socket: Socket, status: number, body: string, startedAt: number, requestId: string, moreHead = ''): boolean {
  if (!socket.writable) return false;
  socket.write(
    `HTTP/1.1 ${status} ${STATUS_TEXT[status] ?? 'Bad Request'}\r\ncontent-type: application/json; charset=utf-8\r\n${moreHead}` +
      `content-length: ${Buffer.byteLength(body)}\r\n${H.requestId}: ${requestId}\r\n` +
      `${H.serverTiming}: ${serverTiming(performance.now() - startedAt, 0)}\r\nconnection: close\r\n\r\n${body}`,
  );
  return true;
}

const STATUS_TEXT: Record<number, string> = {
  400: 'Bad Request',
  405: 'Method Not Allowed',
  408: 'Request Timeout',
  431: 'Request Header Fields Too Large',
};
