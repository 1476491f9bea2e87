import pino, { type DestinationStream } from 'pino';

/** How long an exit the drain did not bound (a crash) waits for a full stdout. */
const EXIT_FLUSH_MS = 1_000;

/**
 * Where the structured log goes: stdout, written in the background from a buffer of at most `maxBytes`. A log
 * pipeline that reads slowly or not at all (a stalled fluentd, a paused `| tee`) never stalls a request: lines past
 * the bound are dropped whole and counted, and said in one warning once stdout takes lines again. Without the bound,
 * pino's default buffered every line in memory for as long as the reader stalled, and its flush at exit waited for the
 * reader with no end, holding a SIGTERM's exit past GW_SHUTDOWN_TIMEOUT_MS for as long as the pipe stayed full.
 */
export class LogOutput {
  readonly stream: DestinationStream;
  /** Lines dropped since the process began. */
  dropped = 0;
  private unsaid = 0;
  private since = 0;
  private giveUpAt = Number.POSITIVE_INFINITY;
  private warn: ((count: number, sinceMs: number) => void) | null = null;
  private flushed = false;
  private saying = false;
  private sayAgain = false;

  constructor(maxBytes: number) {
    // Node makes a pipe or terminal on stdout non-blocking as it opens it: a full pipe is then EAGAIN, retried in
    // the background, not a write that holds a thread (or, at exit, the process) until the reader reads.
    void process.stdout;
    // Before pino's own flush at exit (which waits for the reader with no bound): any exit, a crash's too, waits at most 1 s.
    process.prependListener('exit', () => this.flushWithin(EXIT_FLUSH_MS));
    const sonic = pino.destination({
      dest: 1,
      sync: false,
      maxLength: maxBytes,
      // A full pipe is waited for (100 ms between tries) until the exit's bound, then given up.
      retryEAGAIN: () => Date.now() < this.giveUpAt,
    });
    sonic.on('drop', () => this.onDrop(sonic));
    // A stdout that fails for good (closed, EIO) has no one to say it to: its lines are dropped, not the process.
    sonic.on('error', () => {});
    this.stream = sonic;
  }

  /** Who says how many lines were dropped, once stdout takes lines again (the app's logger, made after the stream). */
  reportTo(warn: (count: number, sinceMs: number) => void): void {
    this.warn = warn;
  }

  /**
   * Writes what is buffered before the process exits, waiting at most `withinMs` for a full pipe; what is left then is
   * dropped, and said on stderr.
   */
  flushWithin(withinMs: number): void {
    if (this.flushed) return;
    this.flushed = true;
    const sonic = this.stream as Sonic;
    this.giveUpAt = Date.now() + withinMs;
    try {
      sonic.flushSync();
    } catch {
      process.stderr.write(`gw: stdout took no log line for ${withinMs} ms at exit; the lines still buffered are dropped\n`);
    }
    // Destroyed, pino's own flush at exit (which waits for the reader with no bound) has nothing to do.
    sonic.destroy();
  }

  private onDrop(sonic: Sonic): void {
    // The warning itself found the buffer still full: it is said at a later write, with what is dropped till then.
    if (this.saying) {
      this.sayAgain = true;
      return;
    }
    this.dropped++;
    if (this.unsaid++ > 0) return;
    this.since = Date.now();
    this.sayAtNextWrite(sonic);
  }

  /** A write that completes is stdout taking lines again: the count is said then. */
  private sayAtNextWrite(sonic: Sonic): void {
    sonic.once('write', () => {
      this.saying = true;
      this.sayAgain = false;
      this.warn?.(this.unsaid, this.since);
      this.saying = false;
      if (this.sayAgain) this.sayAtNextWrite(sonic);
      else this.unsaid = 0;
    });
  }
}

type Sonic = ReturnType<typeof pino.destination>;
