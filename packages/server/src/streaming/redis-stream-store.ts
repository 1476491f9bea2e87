import type { Redis } from 'ioredis';
import { type InstancePresence, instanceKey } from '../kv/instance-presence.js';
import { decodeEvents, encodeEvents } from './event-batch.js';
import { streamErrorData } from './sse-format.js';
import {
  DELIVERED_LINGER_S,
  MAX_STREAM_BYTES,
  MAX_STREAM_EVENTS,
  STREAM_RETENTION_S,
  type StreamEvent,
  type StreamEventKind,
  type StreamMeta,
  type StreamRouting,
  type StreamStore,
  SYNTHETIC_SEQ,
} from './types.js';

const eventsKey = (id: string) => `gw:stream:{${id}}:events`;
const metaKey = (id: string) => `gw:stream:{${id}}:meta`;
/** A resume on another instance waits this long for new events before it checks on the instance relaying the stream. */
const FOLLOW_BLOCK_MS = 2_000;
/**
 * About the most characters of the buffer one resume reads at once (at least one entry, a batch of events). What it
 * read stays in memory until its client takes it: asking for 500 entries, a client that stopped reading a 20 MB
 * stream held all of it, 40 MB of the instance's heap, outside GW_STREAM_MEMORY_MB.
 */
const FOLLOW_READ_CHARS = 1024 * 1024;
const FOLLOW_MAX_ENTRIES = 500;

/** How long a stream whose buffer writes fail keeps its events to try again. */
const RETRY_FOR_MS = 60_000;

/** How long a stream's events may wait to be written together (its first event is written at once). */
export const APPEND_COALESCE_MS = 100;

/**
 * The most characters of batches sent to Redis and not yet answered, or waiting in the connection's write buffer:
 * past it, batches wait gathered (their events are the sessions' own, held once) rather than pile up as copies. A
 * Redis slower than the streams (fast readers of large streams) timed their writes out, and each retry sent the
 * stream's whole backlog again: 60 streams of 15 MB held 2 GB in batch copies.
 */
export const MAX_IN_FLIGHT_CHARS = 16 * 1024 * 1024;
/**
 * A stream with more than this gathered and waiting (a stream's most, as its session keeps it: the events are the
 * same strings) gives it up, all but its last event: a resume elsewhere then meets the hole and is told
 * (bufferGapEvent), as after RETRY_FOR_MS of failed writes. The stream itself goes on.
 */
export const MAX_WAITING_CHARS = MAX_STREAM_BYTES;

/**
 * A batch of one stream's events as one entry (one slot: both keys share
 * the stream's hash tag), unless the stream has an entry as far on (a
 * retry of a batch that went in although its call failed: readers skip
 * events they have seen, so a retried batch may overlap the entry before
 * it). Every batch carries the stream's meta record, written when Redis
 * has none (the first batch, or any after Redis lost its data), and a key
 * made by the batch gets the expiry of a running stream.
 * ARGV: max length, ttl (0: leave it), owner key id ('' : no meta), model,
 * entry id, the events (see {@link encodeEvents}), routing (JSON, '' : none),
 * the relaying instance, the expiry (s) of a key the batch makes.
 */
const APPEND_EVENTS = `
local keep = tonumber(ARGV[9])
if ARGV[3] ~= '' and redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('HSET', KEYS[2], 'keyId', ARGV[3], 'model', ARGV[4], 'routing', ARGV[7], 'instance', ARGV[8])
  redis.call('EXPIRE', KEYS[2], keep)
end
local top = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)[1]
local topSeq = top and tonumber(string.match(top[1], '^(%d+)')) or 0
-- A retried batch whose first try ran after all (its call timed out here, not there) is in already.
if topSeq < tonumber(string.match(ARGV[5], '^(%d+)')) then
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], ARGV[5], 'e', ARGV[6])
  if not top then redis.call('EXPIRE', KEYS[1], keep) end
end
local ttl = tonumber(ARGV[2])
if ttl > 0 then
  redis.call('EXPIRE', KEYS[1], ttl)
  redis.call('EXPIRE', KEYS[2], ttl)
end
return 1
`;

/** The id of a stream's last entry (`<seq>-1`, its last event's seq), without its events; `0-0` for none. */
const LAST_EVENT_ID = `
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if #last == 0 then return '0-0' end
return last[1][1]
`;

/**
 * A running stream's meta record, written when Redis has none, with the expiry of a running stream (as a batch makes
 * it). ARGV: owner key id, model, routing (JSON, '' : none), the relaying instance, the expiry (s).
 */
const WRITE_META = `
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'keyId', ARGV[1], 'model', ARGV[2], 'routing', ARGV[3], 'instance', ARGV[4])
  redis.call('EXPIRE', KEYS[1], tonumber(ARGV[5]))
end
return 1
`;

type WriteMeta = (meta: string, keyId: string, model: string, routing: string, instance: string, keep: number) => unknown;

type AppendEvents = (
  events: string,
  meta: string,
  maxLen: number,
  ttl: number,
  keyId: string,
  model: string,
  entryId: string,
  batch: string,
  routing: string,
  instance: string,
  keep: number,
) => Promise<unknown>;

const ends = (e: StreamEvent | undefined) => e?.kind === 'done' || e?.kind === 'error';

/**
 * What a resume elsewhere ends with when the instance relaying its stream is gone: the rest of the stream went
 * with it. Numbered SYNTHETIC_SEQ, so that its frame carries no id: a client's last id stays the last real event's.
 */
function relayLostEvent(): StreamEvent {
  const message = 'The gateway instance relaying this stream is not answering; the rest of the stream cannot be sent from here.';
  return syntheticError(message);
}

/** A resume that meets events missing from the buffer (lost in a long Redis outage) ends here instead of skipping them. */
function bufferGapEvent(from: number, to: number): StreamEvent {
  const which = from === to ? `event ${from}` : `events ${from} to ${to}`;
  return syntheticError(`The shared resume buffer is missing ${which} of this stream; it cannot be resumed whole from here.`);
}

/** A resume read from the shared buffer that expired before the read reached the stream's end. */
function bufferExpiredEvent(from: number): StreamEvent {
  const message = `The stream's resume buffer expired before event ${from} was read from it; the rest cannot be sent and the stream cannot be resumed further.`;
  return { seq: SYNTHETIC_SEQ, kind: 'error', data: streamErrorData(message, 'stream_not_found') };
}

/** What a resume read here ends with when this instance shuts down, as a stream it relays would (its code included). */
function shutdownEvent(): StreamEvent {
  const message = 'This gateway instance is shutting down and ended the stream here; resume it from the last event received (another instance answers).';
  return { seq: SYNTHETIC_SEQ, kind: 'error', data: streamErrorData(message, 'shutting_down') };
}

function syntheticError(message: string): StreamEvent {
  // The shared buffer cannot give the rest: the gateway's side failed, not the provider's.
  return { seq: SYNTHETIC_SEQ, kind: 'error', data: streamErrorData(message, 'store_unavailable') };
}

/**
 * The resume buffer in Redis Streams, shared by every instance. Each entry
 * holds consecutive events and is named after the last of them
 * (`<seq>-1`), so "after event N" is an exclusive range from `N-1`, less
 * the events at or before N in the first entry it returns. Keys expire a
 * while after the stream ends (or after the grace period if it never does).
 *
 * A stream's first event is written at once (with its meta record, which
 * a resume on another instance checks first; the records of all running
 * streams are written again when the connection is back, as Redis may
 * have restarted empty). The ones after it are
 * gathered, and every APPEND_COALESCE_MS one timer writes each stream's
 * batch as one entry, all in one round trip (ioredis pipelines the calls
 * of one tick). A stream's last batch goes out as soon as the client has
 * received the end, with the short linger as its expiry, so no command
 * follows to shorten it; else with the next tick. One command per event
 * was about a quarter of the gateway's CPU under 50 concurrent streams.
 * Clients on this instance read the live session, never this buffer; a
 * resume on another instance sees an event at most that much later.
 */
export class RedisStreamStore implements StreamStore {
  private readonly pending = new Map<string, StreamEvent[]>();
  /** Meta records of the streams being written, sent with each batch and at each reconnect (Redis may have lost them since the first), routing as JSON once. */
  private readonly metaOf = new Map<string, { meta: StreamMeta; routing: string }>();
  /** Streams whose write failed: since when, so that a long outage gives up on them rather than hold their events. */
  private readonly failingSince = new Map<string, number>();
  /**
   * The batches sent whose answer has not come (MAX_IN_FLIGHT_CHARS), by the order they were sent: their
   * characters. One that timed out stays until a later one is answered, since Redis answers in order on one
   * connection (it ran, or failed, by then), or the connection drops (its buffer goes with it).
   */
  private readonly outstanding = new Map<number, number>();
  private outstandingChars = 0;
  private sent = 0;
  /** A PING in flight, whose answer tells that every batch sent before it was answered (the ones timed out too). */
  private probing = false;
  /** Streams whose last batch waits while its client already has it all (written with the short linger). */
  private readonly deliveredWaiting = new Set<string>();
  private tick: NodeJS.Timeout | null = null;
  /** The resumes read from here of streams relayed elsewhere: a shutdown ends them (endFollowers). */
  private readonly followers = new Set<() => void>();
  private followersEnded = false;

  /** Writes every stream's gathered batch while Redis keeps up (the tick), or all of them (`all`: shutdown). */
  private readonly flushAll = async (all = false): Promise<void> => {
    if (this.tick) clearTimeout(this.tick);
    this.tick = null;
    const writes: Promise<void>[] = [];
    for (const [streamId, events] of this.pending) {
      if (all !== true && this.backlogged()) {
        this.wait(streamId, events);
        continue;
      }
      this.pending.delete(streamId);
      writes.push(this.write(streamId, events, this.deliveredWaiting.delete(streamId)));
    }
    if (this.pending.size > 0) {
      this.schedule();
      this.probe();
    }
    await Promise.all(writes);
  };

  constructor(
    private readonly redis: Redis,
    private readonly graceS: number,
    /** This instance, named in the meta record of every stream it relays: a resume elsewhere tells a dead relay from a quiet one. */
    private readonly presence: InstancePresence,
  ) {
    redis.defineCommand('gwAppendEvents', { numberOfKeys: 2, lua: APPEND_EVENTS });
    redis.defineCommand('gwWriteStreamMeta', { numberOfKeys: 1, lua: WRITE_META });
    redis.defineCommand('gwLastEventId', { numberOfKeys: 1, lua: LAST_EVENT_ID });
    // The Redis it reconnected to may have restarted empty: a resume elsewhere would find no record (a final 404)
    // until each stream's next batch, which may be seconds away.
    redis.on('ready', () => this.writeMetaAgain());
    // What was sent and not answered went with the connection.
    redis.on('close', () => this.answered(Number.POSITIVE_INFINITY));
    // So may a FLUSHALL under an open connection, which fires no reconnect.
    presence.onDataLost(() => this.writeMetaAgain());
  }

  /** Every running stream's meta record, written again where Redis lacks it, in one pipeline; a failure leaves it to the next batch. */
  private writeMetaAgain(): void {
    if (this.metaOf.size === 0) return;
    const pipeline = this.redis.pipeline() as unknown as { gwWriteStreamMeta: WriteMeta; exec(): Promise<unknown> };
    const keep = this.graceS + STREAM_RETENTION_S;
    for (const [streamId, { meta, routing }] of this.metaOf) {
      pipeline.gwWriteStreamMeta(metaKey(streamId), meta.keyId, meta.model, routing, this.presence.id, keep);
    }
    pipeline.exec().catch(() => {});
  }

  /** The meta record is written with the first event (a session starts with its first chunk in hand), and kept for the later batches. */
  async create(streamId: string, meta: StreamMeta): Promise<void> {
    this.metaOf.set(streamId, { meta, routing: meta.routing ? JSON.stringify(meta.routing) : '' });
  }

  append(streamId: string, event: StreamEvent): void {
    if (event.seq === 1 && !this.backlogged()) {
      void this.write(streamId, [event], false);
      return;
    }
    const events = this.pending.get(streamId);
    if (events) events.push(event);
    else this.pending.set(streamId, [event]);
    this.schedule();
  }

  /** Whether Redis is behind: what was sent and not answered, or not yet even written to its connection, is at the bound. */
  private backlogged(): boolean {
    return this.outstandingChars >= MAX_IN_FLIGHT_CHARS;
  }

  /** Asks Redis whether it has answered what was sent (batches whose calls timed out wait for no answer of their own). */
  private probe(): void {
    if (this.probing || this.outstanding.size === 0) return;
    this.probing = true;
    const upTo = this.sent;
    this.redis
      .ping()
      .then(
        () => this.answered(upTo),
        () => {},
      )
      .finally(() => {
        this.probing = false;
      });
  }

  /** Batches up to `order` have been answered by Redis (or lost with the connection: `order` Infinity). */
  private answered(order: number): void {
    for (const [sentAs, chars] of this.outstanding) {
      if (sentAs > order) break;
      this.outstandingChars -= chars;
      this.outstanding.delete(sentAs);
    }
  }

  /** A stream's batch left gathered for a later tick; past MAX_WAITING_CHARS, all but its last event are given up. */
  private wait(streamId: string, events: StreamEvent[]): void {
    let chars = 0;
    for (const e of events) chars += e.data.length;
    if (chars > MAX_WAITING_CHARS) this.pending.set(streamId, [events[events.length - 1] as StreamEvent]);
  }

  private schedule(): void {
    if (!this.tick) {
      this.tick = setTimeout(this.flushAll, APPEND_COALESCE_MS);
      this.tick.unref();
    }
  }

  /**
   * A write that failed goes back before what was gathered since, with its meta record, and is
   * tried again with the next tick: a reader elsewhere must not step over a hole in the stream.
   * A stream whose writes keep failing for RETRY_FOR_MS is given up (its resume elsewhere ends with an error).
   */
  private retry(streamId: string, events: StreamEvent[], meta: { meta: StreamMeta; routing: string } | undefined): void {
    const now = Date.now();
    const since = this.failingSince.get(streamId) ?? now;
    if (now - since > RETRY_FOR_MS) {
      this.failingSince.delete(streamId);
      this.pending.delete(streamId);
      this.deliveredWaiting.delete(streamId);
      this.metaOf.delete(streamId);
      return;
    }
    this.failingSince.set(streamId, since);
    if (meta && !this.metaOf.has(streamId)) this.metaOf.set(streamId, meta);
    // Several writes of the stream may have failed together, and in any order: put them back in the stream's own.
    const bySeq = new Map<number, StreamEvent>();
    for (const e of [...events, ...(this.pending.get(streamId) ?? [])]) bySeq.set(e.seq, e);
    this.pending.set(
      streamId,
      [...bySeq.values()].sort((a, b) => a.seq - b.seq),
    );
    this.schedule();
  }

  /**
   * Writes events in order on this connection, as one entry; a failure only
   * degrades resume (the live stream goes on). `delivered`: the batch ends
   * the stream and its client already has it all.
   */
  private async write(streamId: string, events: StreamEvent[], delivered: boolean): Promise<void> {
    const last = events[events.length - 1] as StreamEvent;
    // The expiry is set by the first event and moved by the last; the events between leave it.
    const ttl = ends(last) ? (delivered ? DELIVERED_LINGER_S : STREAM_RETENTION_S) : events[0]?.seq === 1 ? this.graceS + STREAM_RETENTION_S : 0;
    const record = this.metaOf.get(streamId);
    const meta = record?.meta;
    // The stream's last batch: its record is no longer needed here once it is written (a retry puts it back).
    if (ends(last)) this.metaOf.delete(streamId);
    const run = (this.redis as unknown as { gwAppendEvents: AppendEvents }).gwAppendEvents;
    const batch = encodeEvents(events);
    const order = ++this.sent;
    this.outstanding.set(order, batch.length);
    this.outstandingChars += batch.length;
    await run
      .call(
        this.redis,
        eventsKey(streamId),
        metaKey(streamId),
        MAX_STREAM_EVENTS,
        ttl,
        meta?.keyId ?? '',
        meta?.model ?? '',
        `${last.seq}-1`,
        batch,
        record?.routing ?? '',
        this.presence.id,
        this.graceS + STREAM_RETENTION_S,
      )
      .then(
        () => {
          this.answered(order);
          this.failingSince.delete(streamId);
        },
        (err: unknown) => {
          // Refused by Redis is an answer. A timeout is none: the batch may still run there, and sent again whole with
          // all gathered since, as it was, each copy larger, it timed out again (docs/decisions.md).
          if ((err as Error | null)?.name === 'ReplyError') {
            this.answered(order);
            this.retry(streamId, events, record);
          } else this.retryWhatIsMissing(streamId, events, record);
        },
      );
  }

  /** After a call that timed out: asks Redis (behind that call, on the same connection) which events it has, and retries the rest. */
  private retryWhatIsMissing(streamId: string, events: StreamEvent[], record: { meta: StreamMeta; routing: string } | undefined): void {
    const lastId = (this.redis as unknown as { gwLastEventId: (key: string) => Promise<string> }).gwLastEventId;
    lastId.call(this.redis, eventsKey(streamId)).then(
      (id) => {
        const stored = Number(id.split('-')[0]);
        const missing = events.filter((e) => e.seq > stored);
        if (missing.length > 0) this.retry(streamId, missing, record);
        else this.failingSince.delete(streamId);
      },
      () => this.retry(streamId, events, record),
    );
  }

  async meta(streamId: string): Promise<StreamMeta | null> {
    const m = await this.redis.hgetall(metaKey(streamId));
    if (!m['keyId']) return null;
    const meta: StreamMeta = { keyId: m['keyId'], model: m['model'] ?? '' };
    if (m['routing']) meta.routing = JSON.parse(m['routing']) as StreamRouting;
    return meta;
  }

  delivered(streamId: string): void {
    const events = this.pending.get(streamId);
    if (ends(events?.at(-1))) {
      // Redis behind: the last batch waits its turn, to be written with the linger.
      if (this.backlogged()) {
        this.deliveredWaiting.add(streamId);
        return;
      }
      this.pending.delete(streamId);
      void this.write(streamId, events as StreamEvent[], true);
      return;
    }
    // Written already: LT only shortens a TTL (Redis 7); an older Redis refuses it and the longer TTL stays.
    // Plain commands, not a MULTI: they queue behind the stream's last write, whose expiry they must follow.
    const ignore = () => {};
    this.redis.expire(eventsKey(streamId), DELIVERED_LINGER_S, 'LT').catch(ignore);
    this.redis.expire(metaKey(streamId), DELIVERED_LINGER_S, 'LT').catch(ignore);
  }

  async *follow(streamId: string, afterSeq: number, signal: AbortSignal): AsyncIterable<StreamEvent> {
    // A blocking read needs its own connection.
    const reader = this.redis.duplicate({ commandTimeout: undefined, enableOfflineQueue: true, maxRetriesPerRequest: 1 });
    reader.on('error', () => {});
    const stop = () => reader.disconnect();
    signal.addEventListener('abort', stop);
    let shutdown = this.followersEnded;
    const end = () => {
      shutdown = true;
      reader.disconnect();
    };
    this.followers.add(end);
    try {
      if (shutdown) throw new Error('shutting down');
      // Resumed at or past the end of a stream that ended: nothing is left to send.
      if (await endedBy(reader, streamId, afterSeq)) return;
      let last = `${afterSeq}-1`;
      let seen = afterSeq;
      // Entries asked for at once: one until their size is known, then as many as FOLLOW_READ_CHARS holds.
      let count = 1;
      for (;;) {
        if (signal.aborted) return;
        const res = (await reader.xread('COUNT', count, 'BLOCK', FOLLOW_BLOCK_MS, 'STREAMS', eventsKey(streamId), last)) as
          | [string, [string, string[]][]][]
          | null;
        if (!res) {
          const relay = await this.relayOf(reader, streamId);
          // Expired before this read met the stream's end (a reader behind while another took the end and its linger
          // ran out, or the retention did): the client is told, rather than given a stream that stops short and clean.
          if (relay === 'expired') {
            yield bufferExpiredEvent(seen + 1);
            return;
          }
          // Resumed past where a running stream was: it may have ended short of that since.
          if (relay === 'alive') {
            if (await endedBy(reader, streamId, seen)) return;
            continue;
          }
        }
        // When the relay is gone, what it wrote before it went (a last batch may have come since the read) and then the loss.
        const entries = res ?? ((await reader.xread('COUNT', count, 'STREAMS', eventsKey(streamId), last)) as typeof res);
        const read = entries?.[0]?.[1] ?? [];
        count = entriesWithin(read);
        for (const [id, fields] of read) {
          last = id;
          for (const event of entryEvents(id, fields)) {
            // The first entry may begin before the resume point, and a retried batch may repeat events.
            if (event.seq <= seen) continue;
            if (event.seq !== seen + 1) {
              // Events that never reached the buffer: the client is told, rather than given a stream with a hole.
              yield bufferGapEvent(seen + 1, event.seq - 1);
              return;
            }
            seen = event.seq;
            yield event;
            if (ends(event)) return;
          }
        }
        if (!res && !entries?.[0]?.[1]?.length) {
          yield relayLostEvent();
          return;
        }
      }
    } catch {
      // This instance is shutting down: the stream runs on where it is relayed, and another instance resumes it.
      if (shutdown && !signal.aborted) yield shutdownEvent();
      // Redis went away mid-read: the client is told (and may resume again), rather than cut off without a word.
      else if (!signal.aborted) yield syntheticError('The shared resume buffer became unreachable; resume again shortly from the last event received.');
    } finally {
      this.followers.delete(end);
      signal.removeEventListener('abort', stop);
      reader.disconnect();
    }
  }

  /** Whether the stream is still relayed: its record expired, its instance is alive, or that instance is gone. */
  private async relayOf(reader: Redis, streamId: string): Promise<'expired' | 'alive' | 'gone'> {
    const instance = await reader.hget(metaKey(streamId), 'instance');
    // A record without the field (written before instances named themselves) cannot say: it waits for its expiry.
    if (instance === null) return (await reader.exists(metaKey(streamId))) === 0 ? 'expired' : 'alive';
    return (await reader.exists(instanceKey(instance))) === 1 ? 'alive' : 'gone';
  }

  /**
   * Ends every resume read from here (and any that begins from now on) with an error event saying the instance is
   * shutting down, without an id: the client resumes from its last event on another instance, rather than have its
   * connection reset by the exit. The streams themselves run on where they are relayed.
   */
  endFollowers(): void {
    this.followersEnded = true;
    for (const end of this.followers) end();
  }

  /** Writes what is gathered (shutdown). */
  async close(): Promise<void> {
    await this.flushAll(true);
  }
}

/** How many entries of `read`'s size fit in FOLLOW_READ_CHARS (at least one, and one again after a read of none). */
function entriesWithin(read: [string, string[]][]): number {
  if (read.length === 0) return 1;
  let chars = 0;
  for (const [, fields] of read) for (const f of fields) chars += f.length;
  return Math.max(1, Math.min(FOLLOW_MAX_ENTRIES, Math.floor((FOLLOW_READ_CHARS * read.length) / Math.max(1, chars))));
}

/** Whether the stream has ended at or before event `seq`: a read from there has nothing to send. */
async function endedBy(reader: Redis, streamId: string, seq: number): Promise<boolean> {
  const [tail] = (await reader.xrevrange(eventsKey(streamId), '+', '-', 'COUNT', 1)) as [string, string[]][];
  const lastEvent = tail ? entryEvents(tail[0], tail[1]).at(-1) : undefined;
  return lastEvent !== undefined && ends(lastEvent) && lastEvent.seq <= seq;
}

/** An entry's events: a batch (field `e`), or one event in fields `k` and `d` as instances before batches wrote them. */
function entryEvents(id: string, fields: string[]): StreamEvent[] {
  const f: Record<string, string> = {};
  for (let i = 0; i + 1 < fields.length; i += 2) f[fields[i] as string] = fields[i + 1] as string;
  const batch = f['e'];
  if (batch !== undefined) return decodeEvents(batch);
  return [{ seq: Number(id.split('-')[0]), kind: (f['k'] ?? 'chunk') as StreamEventKind, data: f['d'] ?? '' }];
}
