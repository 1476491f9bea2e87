import type { Command, Redis, RedisOptions } from 'ioredis';
import { steadyMs } from '../lib/clock.js';
import { waitAtMost } from '../lib/wait-at-most.js';
import type { Bus } from './types.js';

/**
 * Options for the request-path client: no offline queue and no retries per
 * command, so a Redis that is gone (its connection closed or refused)
 * fails a call at once instead of queueing it (the limiter then fails
 * open). A Redis that is there but slow (a burst on a busy machine) is
 * waited for: the command timeout is 500 ms, since failing open on a slow
 * reply let bursts past the limit (and budgets past their ledger) while
 * Redis was up. A Redis that stops answering on an open connection (a
 * network partition) is taken for gone after a few commands in a row time
 * out: the connection is dropped, and commands fail at once until it is
 * back. Reconnects back off instead of storming.
 */
export const FAST_FAIL_OPTIONS: RedisOptions = {
  enableOfflineQueue: false,
  maxRetriesPerRequest: 0,
  commandTimeout: 500,
  // A request's commands are written as soon as the code that issued them returns (writeTogetherPerRun).
  // Auto-pipelining would hold them until every request read in the same turn of the event loop has
  // issued its own (setImmediate): under a burst of requests, each waited for the whole burst's work
  // before its limiter count left.
  enableAutoPipelining: false,
  lazyConnect: true,
  connectTimeout: 1000,
  retryStrategy: (times) => Math.min(100 * 2 ** Math.min(times, 6), 2000),
};

/**
 * For background writers (the stream resume buffer): every command of one turn of the event loop
 * goes out in one socket write, since none of them is on a request's path.
 */
export const BATCHING_OPTIONS: RedisOptions = { ...FAST_FAIL_OPTIONS, enableAutoPipelining: true };

/** How long a start waits for a Redis connection to be ready before it goes on without it (connectTimeout is 1 s). */
const CONNECT_WAIT_MS = 2_000;

const lastErrors = new WeakMap<Redis, unknown>();

/** The last connection error of a client made by {@link connectRedis} since it was last ready, if any. */
export function lastConnectionError(client: Redis): unknown {
  return lastErrors.get(client);
}

export async function connectRedis(url: string, options: RedisOptions = FAST_FAIL_OPTIONS): Promise<Redis> {
  const { commandTimeout, ...rest } = options;
  // Loaded by the first connection: a gateway without Redis never holds ioredis (about 1.5 MB of heap).
  const { Redis } = await import('ioredis');
  const client = new Redis(url, rest);
  if (commandTimeout !== undefined) applyLagTolerantTimeout(client, commandTimeout);
  if (!rest.enableAutoPipelining) writeTogetherPerRun(client);
  // Errors are expected while Redis is away; callers see failed commands, not crashes. The last one is kept to say
  // why the connection went (it may come before the caller listens: a refused password fails connect() itself).
  client.on('error', (err: unknown) => {
    lastErrors.set(client, err);
  });
  client.on('ready', () => {
    lastErrors.delete(client);
  });
  // Start anyway: the client keeps reconnecting, and callers fail open meanwhile. A Redis that takes the connection but
  // does not answer (stalled, paused) never settles connect(): its ready check waits for a reply, and the start with it.
  await waitAtMost(
    client.connect().catch(() => {}),
    CONNECT_WAIT_MS,
  );
  return client;
}

/**
 * The database REDIS_URL names (its path, `/N`) that this Redis refused: it refuses SELECT of a database past its
 * `databases` setting (16 by default), and its client then goes on in database 0 without a word, where another
 * deployment's keys may be. Null when it took it, when the URL names database 0, or when Redis is not answering yet
 * (nothing to ask; the start goes on failing open, as it does).
 */
export async function refusedDatabase(client: Redis, url: string): Promise<string | null> {
  const db = Number(new URL(url).pathname.slice(1) || '0');
  if (db === 0 || client.status !== 'ready') return null;
  try {
    await client.select(db);
    return null;
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    return /out of range|invalid DB index/i.test(message) ? message : null;
  }
}

/**
 * The commands issued in one run of code (a request's limiter count and
 * budget hold, say) leave in one socket write: the socket is corked at the
 * first and uncorked on `process.nextTick`, which runs as soon as that code
 * returns, before the event loop reads or runs anything else. Unlike
 * auto-pipelining, nothing waits for other requests' work.
 */
function writeTogetherPerRun(client: Redis): void {
  const send = client.sendCommand.bind(client);
  let corked: Redis['stream'] | null = null;
  const uncork = () => {
    const socket = corked;
    corked = null;
    socket?.uncork();
  };
  client.sendCommand = (command: Command, stream?: Parameters<Redis['sendCommand']>[1]) => {
    if (corked === null && client.status === 'ready' && client.stream) {
      corked = client.stream;
      corked.cork();
      process.nextTick(uncork);
    }
    return send(command, stream);
  };
}

/**
 * ioredis's own command timeout is a plain timer, and Node runs due timers
 * before it reads sockets: after the event loop stalls longer than the
 * timeout, every command in flight "times out" although its reply is
 * already waiting, and callers fail open needlessly. This timeout, once
 * due, waits one turn of the loop (setImmediate runs after the socket
 * reads), so only a reply that truly has not come counts as a timeout.
 */
const DEAD_AFTER_TIMEOUTS = 3;

function applyLagTolerantTimeout(client: Redis, ms: number): void {
  const send = client.sendCommand.bind(client);
  // Commands in the order they were sent, so in the order they fall due: one timer for the oldest
  // unsettled one, instead of a timer and a promise reaction for every command. A slot is emptied
  // as the head passes it: a settled command kept here until the next compaction outlived young
  // collections with its arguments and promise (0.6 KB of the 8.6 KB per request that outlived one).
  const waiting: ({ command: Command; due: number } | undefined)[] = [];
  let head = 0;
  let timer: NodeJS.Timeout | null = null;
  // Commands timed out in a row, with no reply between them: past a few, the connection is dead.
  let timedOutInARow = 0;
  const takeHead = () => {
    const entry = waiting[head] as { command: Command; due: number };
    waiting[head++] = undefined;
    return entry;
  };
  const arm = () => {
    while (head < waiting.length && (waiting[head] as { command: Command }).command.isSettled) {
      takeHead();
      timedOutInARow = 0;
    }
    if (head > 1024 && head * 2 > waiting.length) {
      waiting.splice(0, head);
      head = 0;
    }
    if (timer !== null || head >= waiting.length) return;
    timer = setTimeout(sweep, Math.max(0, (waiting[head] as { due: number }).due - performance.now()));
  };
  const sweep = () => {
    timer = null;
    // Only what was due when the timer fired has had a whole read of the sockets since: a command that fell due
    // during the turn that follows (a burst's requests read in one go) may have its reply waiting, read next turn.
    const swept = performance.now();
    setImmediate(() => {
      while (head < waiting.length && (waiting[head] as { due: number }).due <= swept) {
        const { command } = takeHead();
        if (!command.isSettled) {
          command.reject(new Error('Command timed out'));
          timedOutInARow++;
        }
      }
      if (timedOutInARow >= DEAD_AFTER_TIMEOUTS) {
        timedOutInARow = 0;
        // Reconnects (retryStrategy): meanwhile commands fail at once, without their timeout. A turn later, so that
        // what the callers send on learning of the timeouts still goes on this connection: a stalled Redis runs it
        // when it wakes (the budget ledger's reconciliation mark, which must come before any other instance's reserve).
        setImmediate(() => client.disconnect(true));
      }
      arm();
    });
  };
  client.sendCommand = (command: Command, stream?: Parameters<Redis['sendCommand']>[1]) => {
    const result = send(command, stream);
    if (!command.isSettled) {
      waiting.push({ command, due: performance.now() + ms });
      arm();
    }
    return result;
  };
}

/** How long after a refused resubscribe the subscriber connection is made again, to try once more. */
const RESUBSCRIBE_RETRY_MS = 1_000;
/**
 * How often the subscriber connection is pinged. It sends nothing else, so a Redis that stops answering on it (a
 * partition, a paused server, a NAT that dropped the connection's state) was never noticed: the instance trusted its
 * cached keys for their whole TTL (30 s), a revocation made meanwhile unheard. A ping unanswered this long makes it
 * deaf (keys read again after 250 ms, as with Redis away); unanswered for {@link SUB_DEAD_MS}, the connection is made anew.
 */
const SUB_PING_MS = 1_000;
const SUB_DEAD_MS = 5_000;
/**
 * Best-effort publishes (offer stats, registry rebuilds, budget reloads) waiting for Redis at most: past it one is
 * dropped at once, not queued behind a Redis that does not answer.
 */
const MAX_PUBLISHES_UNANSWERED = 64;
/**
 * How long publishes may wait with no reply at all before the publishing connection is made anew (a connection whose
 * peer is gone without a word). Longer than an admin change's 5 s wait, which says 'late' rather than 'failed'.
 */
const PUB_DEAD_MS = 10_000;

/** Pub/sub over Redis, so that every instance hears a revocation within milliseconds. */
export class RedisBus implements Bus {
  private readonly channels = new Set<string>();
  private readonly resubscribeHandlers: (() => void)[] = [];
  private readonly publishReadyHandlers: (() => void)[] = [];
  /** Null while the subscriptions are live; else since when they are not (the start counts as a loss). */
  private deafFrom: number | null = steadyMs();
  /** When the subscriber's unanswered ping was sent (null: none is); its connection's turn, so a ping of a dropped one is ignored. */
  private pingSentAt: number | null = null;
  private pingTurn = 0;
  private readonly heartbeat: NodeJS.Timeout;
  private retryTimer: NodeJS.Timeout | null = null;
  /** Publishes written and not answered yet (best-effort and awaited), the best-effort ones among them. */
  private pubWaiting = 0;
  private bestEffortWaiting = 0;
  /** Since when publishes have waited with no reply (null: none waits). */
  private pubSilentFrom: number | null = null;
  private readonly publishDone = (): void => {
    this.pubSilentFrom = --this.pubWaiting === 0 ? null : Date.now();
  };
  private readonly bestEffortDone = (): void => {
    this.bestEffortWaiting--;
  };

  private constructor(
    private readonly pub: Redis,
    private readonly sub: Redis,
    private readonly Command: typeof import('ioredis').Command,
  ) {
    this.heartbeat = setInterval(() => {
      this.checkSubscriber();
      this.checkPublisher();
    }, SUB_PING_MS);
    this.heartbeat.unref();
    // Both connect (or fail to, with Redis away at start) before this constructor runs: each 'ready' here
    // follows a time without a connection, when messages went unheard and publishes failed.
    // Resubscribed here rather than by ioredis: its own resubscribe after a reconnect has no rejection
    // handler, so a Redis that goes away again at that moment made an unhandled rejection.
    sub.on('ready', () => {
      if (this.channels.size > 0)
        sub.subscribe(...this.channels).then(
          () => {
            this.deafFrom = null;
            runAll(this.resubscribeHandlers);
          },
          (err: unknown) => this.retryRefused(err),
        );
    });
    // Noticed at once (Redis closing a slow subscriber, a restart): until the subscriptions are renewed, a reconnect
    // backoff later, what other instances publish goes unheard.
    sub.on('close', () => {
      this.deafFrom ??= steadyMs();
      this.pingSentAt = null;
      this.pingTurn++;
    });
    pub.on('ready', () => runAll(this.publishReadyHandlers));
  }

  /** Pings the subscriber connection; one whose last ping is not answered is deaf from when it was sent, and dropped later. */
  private checkSubscriber(): void {
    if (this.sub.status !== 'ready' || this.channels.size === 0) return;
    const now = steadyMs();
    const sentAt = this.pingSentAt;
    if (sentAt !== null) {
      // What was published since the ping may be waiting behind it, unheard.
      if (now - sentAt >= SUB_PING_MS) this.deafFrom ??= sentAt;
      if (now - sentAt >= SUB_DEAD_MS) this.sub.disconnect(true);
      return;
    }
    const turn = this.pingTurn;
    this.pingSentAt = now;
    const answered = (): void => {
      if (turn !== this.pingTurn) return;
      // Answered: every message published before the ping has been heard. Deaf since a close, the resubscribe says.
      if (this.deafFrom !== null && this.deafFrom >= now) this.deafFrom = null;
      this.pingSentAt = null;
    };
    // An error reply answers too (an ACL without PING: least-privilege users listing @read @write @pubsub lack it):
    // taken for silence, it made the instance deaf a second after each ping and its subscriber reconnect every 5 s.
    this.sub.ping().then(answered, (err: unknown) => {
      if (isReplyError(err)) answered();
    });
  }

  /** Drops a publishing connection that has answered nothing for {@link PUB_DEAD_MS} while publishes wait: they fail, and it reconnects. */
  private checkPublisher(): void {
    if (this.pubSilentFrom !== null && Date.now() - this.pubSilentFrom >= PUB_DEAD_MS) {
      this.pubSilentFrom = Date.now();
      this.pub.disconnect(true);
    }
  }

  /**
   * A subscribe refused (an ACL without SUBSCRIBE) is tried again on a new connection, not left deaf until the next
   * time this one drops: refused at start, the instance never subscribed, even once the ACL allowed it.
   */
  private retryRefused(err: unknown): void {
    if (!isReplyError(err) || this.retryTimer !== null) return;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      if (this.sub.status === 'ready') this.sub.disconnect(true);
    }, RESUBSCRIBE_RETRY_MS);
    this.retryTimer.unref();
  }

  onResubscribe(handler: () => void): void {
    this.resubscribeHandlers.push(handler);
  }

  onPublishReady(handler: () => void): void {
    this.publishReadyHandlers.push(handler);
  }

  deafSince(): number | null {
    return this.deafFrom;
  }

  static async connect(url: string): Promise<RedisBus> {
    const [pub, sub, { Command }] = await Promise.all([
      // No command timeout: its commands are publishes, each waited for as long as its caller chooses (below).
      connectRedis(url, { ...FAST_FAIL_OPTIONS, commandTimeout: undefined }),
      connectRedis(url, { ...FAST_FAIL_OPTIONS, enableOfflineQueue: true, autoResubscribe: false, commandTimeout: undefined }),
      import('ioredis'),
    ]);
    return new RedisBus(pub, sub, Command);
  }

  /**
   * Not failed at the command timeout either: these are the only commands on the publishing connection, and with every
   * reply 800 ms late three offer-stats batches or registry rebuilds timed out in a row and dropped it, so that an admin
   * change made while it reconnected was published nowhere. Bounded instead by how many wait.
   */
  async publish(channel: string, message: string): Promise<number> {
    if (this.bestEffortWaiting >= MAX_PUBLISHES_UNANSWERED) throw new Error(`Redis has not answered ${MAX_PUBLISHES_UNANSWERED} publishes`);
    this.bestEffortWaiting++;
    return await this.sendPublish(channel, message).finally(this.bestEffortDone);
  }

  /**
   * Not failed at the command timeout: a reply 800 ms late made an admin change answer at 500 ms as if nobody had
   * heard it, while Redis delivered it moments later. A command written stays written: it fails only with its
   * connection (then unsent, or unanswered, as with Redis away).
   */
  async publishAwaited(channel: string, message: string): Promise<number> {
    return await this.sendPublish(channel, message);
  }

  private sendPublish(channel: string, message: string): Promise<number> {
    const sent = this.pub.sendCommand(new this.Command('publish', [channel, message])) as Promise<number>;
    // Unsent (the connection is away): rejected already, nothing waits.
    if (this.pub.status !== 'ready') return sent;
    this.pubSilentFrom ??= Date.now();
    this.pubWaiting++;
    return sent.finally(this.publishDone);
  }

  async subscribe(channel: string, handler: (message: string) => void): Promise<void> {
    this.sub.on('message', (ch: string, msg: string) => {
      if (ch === channel) handler(msg);
    });
    this.channels.add(channel);
    // Redis away at start: the gateway starts anyway (callers fail open), and the 'ready' handler subscribes once it is back.
    // Not sent before then: on a connection still waiting for its ready check it would wait in the offline queue, and
    // the start with it, for as long as a stalled Redis does not answer.
    if (this.sub.status === 'ready') {
      await this.sub.subscribe(channel).then(
        () => {
          this.deafFrom = null;
        },
        (err: unknown) => this.retryRefused(err),
      );
    }
  }

  async close(): Promise<void> {
    clearInterval(this.heartbeat);
    if (this.retryTimer !== null) clearTimeout(this.retryTimer);
    this.pub.disconnect();
    this.sub.disconnect();
  }
}

/** Redis answered with an error (NOPERM, a refusal), as opposed to a connection that closed or a command never sent. */
export function isReplyError(err: unknown): boolean {
  return err instanceof Error && err.name === 'ReplyError';
}

/**
 * A command the Redis user's ACL does not allow (a PING by a user listing @read @write @pubsub): Redis is there and
 * answering all the same, unlike an error reply that says it cannot serve (LOADING, MASTERDOWN).
 */
export function refusedByAcl(err: unknown): boolean {
  return isReplyError(err) && (err as Error).message.startsWith('NOPERM');
}

function runAll(handlers: readonly (() => void)[]): void {
  for (const handler of handlers) handler();
}
