/** Writing replies with timing, backpressure and the in-response faults. */
import type { ServerResponse } from 'node:http';
import type { Fault } from '../types.js';
import type { SseEvent } from '../wire/types.js';

/** Resolves true after `ms`, or false as soon as `signal` aborts. */
export function sleep(ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return Promise.resolve(false);
  if (ms <= 0) return Promise.resolve(true);
  return new Promise((resolve) => {
    const done = (ok: boolean): void => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      resolve(ok);
    };
    const onAbort = (): void => done(false);
    const timer = setTimeout(() => done(true), ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

/** Write and respect backpressure: wait for 'drain' when the socket buffer is full. */
export function write(res: ServerResponse, chunk: string, signal: AbortSignal): Promise<boolean> {
  if (res.write(chunk)) return Promise.resolve(true);
  if (signal.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const onDrain = (): void => finish(true);
    const onAbort = (): void => finish(false);
    const finish = (ok: boolean): void => {
      res.off('drain', onDrain);
      signal.removeEventListener('abort', onAbort);
      resolve(ok);
    };
    res.once('drain', onDrain);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

/** Abort the TCP connection (RST where Node can). */
export function resetConnection(res: ServerResponse): void {
  const socket = res.socket ?? res.req.socket;
  if (typeof socket.resetAndDestroy === 'function') socket.resetAndDestroy();
  else socket.destroy();
}

export function frame(ev: SseEvent): string {
  const data = typeof ev.data === 'string' ? ev.data : JSON.stringify(ev.data);
  return ev.event === undefined ? `data: ${data}\n\n` : `event: ${ev.event}\ndata: ${data}\n\n`;
}

export interface StreamTiming {
  ttftMs: number;
  gapMs: number;
}

/** Where a mid-response fault cuts in, and what it does there. */
interface Cut {
  at: number;
  fault: Fault;
}

function cutOf(fault: Fault | null, events: number): Cut | null {
  if (fault === null) return null;
  switch (fault.kind) {
    case 'hang':
    case 'reset':
      return fault.afterChunks === undefined ? null : { at: fault.afterChunks, fault };
    case 'truncate':
      return { at: fault.afterChunks ?? Math.floor(events / 2), fault };
    case 'error_after_200':
      return { at: fault.afterChunks ?? 1, fault };
    case 'stall':
      return { at: fault.afterChunks, fault };
    default:
      return null;
  }
}

/**
 * Stream SSE events (then `[DONE]` when `done`), honouring time to first token, inter-chunk gap,
 * backpressure, client disconnects and mid-stream faults. `errorData` renders the provider's error
 * object for `error_after_200`.
 */
export async function writeSse(
  res: ServerResponse,
  head: { headers: Record<string, string> },
  events: SseEvent[],
  opts: { done: boolean; timing: StreamTiming; fault: Fault | null; signal: AbortSignal; errorData: (f: Fault) => unknown },
): Promise<void> {
  const { fault, signal } = opts;
  res.writeHead(200, head.headers);
  res.flushHeaders();
  const frames = events.map(frame);
  if (opts.done) frames.push('data: [DONE]\n\n');
  const cut = cutOf(fault, events.length);
  let wait = opts.timing.ttftMs + (fault?.kind === 'slow_first_byte' ? fault.ms : 0);
  const gap = opts.timing.gapMs + (fault?.kind === 'latency' ? (fault.perChunkMs ?? 0) : 0);

  if (cut === null && wait <= 0 && gap <= 0) {
    // No timing: coalesce frames into ~64 KiB writes, still waiting for 'drain' between them.
    let batch = '';
    for (const f of frames) {
      batch += f;
      if (batch.length >= 65_536) {
        if (!(await write(res, batch, signal))) return;
        batch = '';
      }
    }
    res.end(batch);
    return;
  }
  for (let i = 0; i <= frames.length; i++) {
    if (cut !== null && i === Math.min(cut.at, events.length)) {
      const f = cut.fault;
      if (f.kind === 'hang') return; // never write again; the client or close() ends it
      if (f.kind === 'reset') {
        // When the next chunk would have come, as error_after_200's error does: with a gap, the chunks before it reach
        // the client first (a reset right behind them can discard them unread, a failure before the stream began).
        if (wait > 0 && !(await sleep(wait, signal))) return;
        return resetConnection(res);
      }
      if (f.kind === 'truncate') return void res.end();
      if (f.kind === 'error_after_200') {
        if (wait > 0 && !(await sleep(wait, signal))) return;
        await write(res, frame({ data: opts.errorData(f) }), signal);
        return void res.end();
      }
      if (f.kind === 'stall' && !(await sleep(f.ms, signal))) return;
    }
    const chunk = frames[i];
    if (chunk === undefined) break;
    if (wait > 0 && !(await sleep(wait, signal))) return;
    if (!(await write(res, chunk, signal))) return;
    wait = gap;
  }
  res.end();
}

/**
 * A complete (non-streaming) body, with the faults that act inside a response: slow first byte, and
 * hang / reset / truncate / stall after the headers and half of the body (after the headers alone with `afterChunks: 0`).
 */
export async function writeBody(
  res: ServerResponse,
  status: number,
  headers: Record<string, string>,
  body: string,
  opts: { fault: Fault | null; signal: AbortSignal },
): Promise<void> {
  const f = opts.fault;
  const cut = f === null ? null : cutAt(f, body.length);
  const all = { ...headers };
  if (!(cut !== null && f?.kind === 'truncate')) all['content-length'] = String(Buffer.byteLength(body));
  if (f?.kind === 'slow_first_byte') {
    res.writeHead(status, all);
    res.flushHeaders();
    if (!(await sleep(f.ms, opts.signal))) return;
    return void res.end(body);
  }
  if (cut === null || f === null) {
    res.writeHead(status, all);
    res.end(body);
    return;
  }
  res.writeHead(status, all);
  res.flushHeaders();
  if (cut > 0 && !(await write(res, body.slice(0, cut), opts.signal))) return;
  if (f.kind === 'reset') resetConnection(res);
  else if (f.kind === 'truncate') res.end();
  else if (f.kind === 'stall') {
    if (await sleep(f.ms, opts.signal)) res.end(body.slice(cut));
  }
  // hang: leave it open
}

/** Where a fault cuts a whole body: half of it, or nothing of it with `afterChunks: 0`; null where it does not. */
function cutAt(f: Fault, length: number): number | null {
  if (f.kind !== 'hang' && f.kind !== 'reset' && f.kind !== 'truncate' && f.kind !== 'stall') return null;
  return f.afterChunks === 0 ? 0 : Math.floor(length / 2);
}
