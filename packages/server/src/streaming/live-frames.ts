import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import type { Variant } from '@gw/schema';
import type { CutOff, StreamSession } from './session.js';
import { clientEventData, eventId, SSE_HEARTBEAT, sseData, sseEvent } from './sse-format.js';

/**
 * Set on a response whose stream has ended while its client is still behind: its answer is whole, only the client's
 * taking of it is left, so the send timeout (GW_SEND_TIMEOUT_MS) bounds it as it bounds an ended answer.
 */
export const kStreamWhole = Symbol('gw.streamWhole');

/** The most text one write carries (a single larger event still goes whole). */
const WRITE_MAX_CHARS = 16 * 1024;

/**
 * A client's SSE body from a live session: new events are written as
 * they land in the session (those of one upstream read go out in one
 * write), the usage chunk only if the client asked for it, and a comment
 * after every `heartbeatMs` of silence.
 *
 * Paced by the client: while its socket is full the frames wait in the
 * session's log, not in this stream, and go out when it drains. Closing
 * the client's side (destroy) detaches from the session, which starts its
 * grace period if no other reader is left.
 *
 * Piped to a response given to {@link sendThrough}, the frames skip the
 * stream and the response's own write path: each one goes to the socket in
 * one write, framed as an HTTP chunk here (see {@link socketWriter}). The
 * stream then only marks the start (its first read, once the response's
 * headers are set) and the end (which ends the response).
 *
 * Given to {@link writeTo}, it is not piped at all: it writes the head and
 * the frames to the response itself and ends it, which spares a route that
 * writes its own answer the stream plumbing of a piped body (listeners,
 * end-of-stream watchers, a header copy): about a fifth of what a stream
 * keeps past a young collection.
 */
export class LiveFrames extends Readable {
  private next: number;
  /** Where this client's reading began: it was sent the stream's last event only if it read past it. */
  private readonly from: number;
  private endSent = false;
  /** Bytes of event data read from the session (how far behind this client is, for the memory bound). */
  private readBytes = 0;
  private wanting = false;
  private stopped = false;
  private response: ServerResponse | null = null;
  private direct: SocketWriter | null = null;
  /** Set by writeTo: the response this stream writes and ends itself. */
  private owned: ServerResponse | null = null;
  /** The response the frames go to (owned or piped to), marked when the stream ended with this client behind. */
  private target: ServerResponse | null = null;
  private readonly unsubscribe: () => void;
  private readonly heartbeat: NodeJS.Timeout;

  constructor(
    private readonly session: StreamSession,
    afterSeq: number,
    private readonly includeUsage: boolean,
    heartbeatMs: number,
    /** The base the client asked on: an error event comes in its envelope. */
    private readonly variant: Variant,
  ) {
    super({ highWaterMark: 16 * 1024 });
    this.next = afterSeq;
    this.from = afterSeq;
    if (afterSeq > 0) this.readBytes = session.bytesThrough(afterSeq);
    this.unsubscribe = session.subscribe(
      () => this.flush(),
      () => this.readBytes,
    );
    this.heartbeat = setInterval(() => {
      // Silence for heartbeatMs: a comment keeps proxies and clients from timing out.
      if (this.wanting) this.wanting = this.write(SSE_HEARTBEAT);
    }, heartbeatMs);
    this.heartbeat.unref();
  }

  /**
   * This response carried the stream's own last event (`[DONE]` or its error): its client has the stream whole. Not
   * so for one resumed at or past the end (sent nothing), nor one cut short by the memory bound's event.
   */
  get sentEnd(): boolean {
    return this.endSent;
  }

  /** The response this stream is piped to, to write to its socket directly. */
  sendThrough(response: ServerResponse): this {
    this.response = response;
    this.target = response;
    return this;
  }

  /**
   * Writes the frames to `res` without being piped: the head (status and
   * `headers`) goes out with the first frame, the response ends after the
   * last, and a response closed first (the client left) destroys this
   * stream, which detaches it from the session.
   */
  writeTo(res: ServerResponse, status: number, headers: OutgoingHttpHeaders): void {
    this.owned = res;
    this.target = res;
    // The client may have left while the first chunk was awaited. A response without a socket is not
    // gone: it is pipelined behind another on its connection, and Node queues its writes until its turn.
    if (res.destroyed || res.socket?.destroyed || res.req.socket.destroyed) {
      this.destroy();
      return;
    }
    res.once('close', () => {
      if (!this.stopped) this.destroy();
    });
    this.direct = socketWriter(res, this.drained, { status, headers }) ?? responseWriter(res, this.drained, status, headers);
    this.drained();
    if (!this.stopped) this.direct.head();
  }

  override _read(): void {
    const first = this.response;
    if (first) {
      this.direct = socketWriter(first, this.drained);
      this.response = null;
    }
    this.drained();
    // Only the first read: later ones come after frames, or after the head.
    if (first && !this.stopped) this.direct?.head();
  }

  /** The client can take more (its socket drained, or the first read): write what waits. */
  private readonly drained = (): void => {
    this.wanting = true;
    this.flush();
  };

  override _destroy(err: Error | null, callback: (error?: Error | null) => void): void {
    this.stop();
    callback(err);
  }

  private write(text: string): boolean {
    return this.direct ? this.direct.write(text) : this.push(text);
  }

  private flush(): void {
    const cut = this.session.cutOff;
    if (cut !== null) {
      this.cutOff(cut);
      return;
    }
    const log = this.session.log;
    // The last frames, and the empty chunk that ending the response adds a tick later, leave in one write.
    if (this.direct && this.session.ended && !this.stopped && this.wanting && this.next < log.length) this.direct.holdForEnd();
    // Events that arrived together go out in one write, up to a bound: a client that was slow gets its backlog in pieces the socket can take.
    while (this.wanting && !this.stopped && this.next < log.length) {
      let text = '';
      while (this.next < log.length && text.length < WRITE_MAX_CHARS) {
        const e = log[this.next++];
        if (e === undefined) continue;
        this.readBytes += e.data.length;
        if (e.kind === 'usage' && !this.includeUsage) continue;
        text += sseEvent(eventId(this.session.streamId, e.seq), clientEventData(e, this.variant));
      }
      if (text === '') break;
      this.heartbeat.refresh();
      this.wanting = this.write(text);
    }
    if (!this.stopped && this.session.ended) {
      if (this.next >= log.length) {
        this.endSent = this.next > this.from;
        this.stop();
        if (this.owned) this.owned.end();
        else this.push(null);
      } else if (this.target !== null) {
        // The rest waits on a full socket: the send timeout now judges whether the client still takes it.
        (this.target as ServerResponse & { [kStreamWhole]?: boolean })[kStreamWhole] = true;
        this.target = null;
      }
    }
  }

  /**
   * The memory bound let go of the session's events: a client that had not
   * read them all gets the error event at once, whether or not its socket
   * has room (it is small, and a client that stopped reading may never make
   * room), and the response ends.
   */
  private cutOff(cut: CutOff): void {
    if (this.stopped) return;
    const behind = this.next < cut.end;
    // Not behind: it had read the log to the end its stream was given before the log went.
    this.endSent = !behind && this.next > this.from;
    this.stop();
    if (behind) this.write(sseData(clientEventData(cut.event, this.variant)));
    if (this.owned) this.owned.end();
    else this.push(null);
  }

  private stop(): void {
    this.stopped = true;
    clearInterval(this.heartbeat);
    this.unsubscribe();
    this.direct?.close();
  }
}

interface SocketWriter {
  /** false: the socket is full (or gone); wait for the drain callback. */
  write(text: string): boolean;
  /** Gathers what is written from now until the next turn of the event loop into one write. */
  holdForEnd(): void;
  /**
   * Sends the head now if no frame took it: a resume of a stream that is silent (a model thinking) has no event to
   * send, and its head waited for the first heartbeat, so its client had no status for up to GW_STREAM_HEARTBEAT_MS.
   */
  head(): void;
  close(): void;
}

/**
 * Writes a response's body straight to its socket, one write per piece,
 * with the HTTP/1.1 chunk framing the response would add itself. The
 * response's write path costs a cork, three buffered writes, a writev and
 * several ticks per piece, and its garbage was a tenth of a stream's.
 *
 * Only while the response holds nothing of its own (else its bytes and
 * ours could interleave); otherwise null, and the frames go through the
 * response as usual. The first frame goes through the response too, with
 * the head. Ending the response still writes the last, empty chunk.
 */
function socketWriter(res: ServerResponse, onDrain: () => void, head?: { status: number; headers: OutgoingHttpHeaders }): SocketWriter | null {
  const socket = res.socket;
  if (!socket || socket.destroyed) return null;
  // The head is built now (it decides the framing) and, when nothing sent it yet, goes out with the
  // first frame through the response: one write for both, where flushing it alone took one more.
  let headWithFirst = !res.headersSent;
  if (headWithFirst) {
    if (head) res.writeHead(head.status, head.headers);
    else res.writeHead(res.statusCode);
  } else res.flushHeaders();
  const chunked = (res as ServerResponse & { chunkedEncoding?: unknown }).chunkedEncoding;
  // Not ours to write to: the frames go through the response, whose first write sends the head.
  if (typeof chunked !== 'boolean' || res.writableLength !== socket.writableLength) return null;
  socket.on('drain', onDrain);
  return {
    write(text: string): boolean {
      if (socket.destroyed) return false;
      if (headWithFirst) {
        headWithFirst = false;
        return res.write(text);
      }
      return socket.write(chunked ? `${Buffer.byteLength(text).toString(16)}\r\n${text}\r\n` : text);
    },
    head(): void {
      if (!headWithFirst || socket.destroyed) return;
      headWithFirst = false;
      res.flushHeaders();
    },
    holdForEnd(): void {
      if (socket.destroyed) return;
      socket.cork();
      // After the ticks in which the stream ends and the response writes its last chunk.
      setImmediate(() => socket.uncork());
    },
    close(): void {
      socket.off('drain', onDrain);
    },
  };
}

/** The frames through the response's own write path: for an owned response whose socket is not ours to write to. */
function responseWriter(res: ServerResponse, onDrain: () => void, status: number, headers: OutgoingHttpHeaders): SocketWriter {
  if (!res.headersSent) res.writeHead(status, headers);
  res.on('drain', onDrain);
  let wrote = false;
  return {
    write(text: string): boolean {
      wrote = true;
      return !res.destroyed && res.write(text);
    },
    head(): void {
      if (!wrote && !res.destroyed) res.flushHeaders();
    },
    holdForEnd(): void {},
    close(): void {
      res.off('drain', onDrain);
    },
  };
}
