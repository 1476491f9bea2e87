import type { Redis } from 'ioredis';
import {
  DELIVERED_LINGER_S,
  MAX_STREAM_EVENTS,
  STREAM_RETENTION_S,
  type StreamEvent,
  type StreamEventKind,
  type StreamMeta,
  type StreamStore,
} from './types.js';

const eventsKey = (id: string) => `gw:stream:{${id}}:events`;
const metaKey = (id: string) => `gw:stream:{${id}}:meta`;

/** How long a stream's events may wait to be written together (the first and the last are written at once). */
export const APPEND_COALESCE_MS = 25;

/**
 * Several events of one stream in one call (one slot: both keys share the
 * stream's hash tag), with the stream's meta record when it is new.
 * ARGV: max length, ttl (0: leave it), owner key id ('' : no meta), model, then id/kind/data triples.
 */
const APPEND_EVENTS = `
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[2], 'keyId', ARGV[3], 'model', ARGV[4])
end
for i = 5, #ARGV, 3 do
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], ARGV[i], 'k', ARGV[i + 1], 'd', ARGV[i + 2])
end
local ttl = tonumber(ARGV[2])
if ttl > 0 then
  redis.call('EXPIRE', KEYS[1], ttl)
  redis.call('EXPIRE', KEYS[2], ttl)
end
return 1
`;

type AppendEvents = (
  events: string,
  meta: string,
  maxLen: number,
  ttl: number,
  keyId: string,
  model: string,
  ...triples: (string | number)[]
) => Promise<unknown>;

interface Pending {
  events: StreamEvent[];
  timer: NodeJS.Timeout;
}

/**
 * The resume buffer in Redis Streams, shared by every instance: entry ids
 * are `<seq>-1`, so "after event N" is an exclusive range. Keys expire a
 * while after the stream ends (or after the grace period if it never does).
 *
 * A stream's first event is written at once (it sets the keys' expiry);
 * the ones after it are gathered for at most APPEND_COALESCE_MS and
 * written by one script call, and the last one (done or error) flushes
 * what is gathered at once. One command per event was about a quarter of
 * the gateway's CPU under 50 concurrent streams. Clients on this instance
 * read the live session, never this buffer; a resume on another instance
 * sees an event at most that much later.
 */
export class RedisStreamStore implements StreamStore {
  private readonly pending = new Map<string, Pending>();
  /** Meta records of streams whose first event is not written yet: they go in the same call. */
  private readonly newMeta = new Map<string, StreamMeta>();

  constructor(
    private readonly redis: Redis,
    private readonly graceS: number,
  ) {
    redis.defineCommand('gwAppendEvents', { numberOfKeys: 2, lua: APPEND_EVENTS });
  }

  /** The meta record is written with the first event (a session starts with its first chunk in hand). */
  async create(streamId: string, meta: StreamMeta): Promise<void> {
    this.newMeta.set(streamId, meta);
  }

  append(streamId: string, event: StreamEvent): void {
    if (event.seq === 1) {
      void this.write(streamId, [event]);
      return;
    }
    let p = this.pending.get(streamId);
    if (!p) {
      p = { events: [], timer: setTimeout(() => void this.flushStream(streamId), APPEND_COALESCE_MS) };
      p.timer.unref();
      this.pending.set(streamId, p);
    }
    p.events.push(event);
    if (event.kind === 'done' || event.kind === 'error') void this.flushStream(streamId);
  }

  private flushStream(streamId: string): Promise<void> {
    const p = this.pending.get(streamId);
    if (!p) return Promise.resolve();
    this.pending.delete(streamId);
    clearTimeout(p.timer);
    return this.write(streamId, p.events);
  }

  /** Writes events in order on this connection; a failure only degrades resume (the live stream goes on). */
  private async write(streamId: string, events: StreamEvent[]): Promise<void> {
    const last = events[events.length - 1] as StreamEvent;
    const ended = last.kind === 'done' || last.kind === 'error';
    // The expiry is set by the first event and moved by the last; the events between leave it.
    const ttl = ended ? STREAM_RETENTION_S : events[0]?.seq === 1 ? this.graceS + STREAM_RETENTION_S : 0;
    const meta = this.newMeta.get(streamId);
    if (meta) this.newMeta.delete(streamId);
    const triples: (string | number)[] = [];
    for (const e of events) triples.push(`${e.seq}-1`, e.kind, e.data);
    const run = (this.redis as unknown as { gwAppendEvents: AppendEvents }).gwAppendEvents;
    const args = [eventsKey(streamId), metaKey(streamId), MAX_STREAM_EVENTS, ttl, meta?.keyId ?? '', meta?.model ?? ''] as const;
    await run.call(this.redis, ...args, ...triples).catch(() => {});
  }

  async meta(streamId: string): Promise<StreamMeta | null> {
    const m = await this.redis.hgetall(metaKey(streamId));
    return m['keyId'] ? { keyId: m['keyId'], model: m['model'] ?? '' } : null;
  }

  delivered(streamId: string): void {
    // LT only shortens a TTL (Redis 7); an older Redis refuses it and the longer TTL stays.
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
    try {
      let last = `${afterSeq}-1`;
      for (;;) {
        if (signal.aborted) return;
        const res = (await reader.xread('COUNT', 500, 'BLOCK', 5000, 'STREAMS', eventsKey(streamId), last)) as [string, [string, string[]][]][] | null;
        if (!res) {
          if ((await reader.exists(metaKey(streamId))) === 0) return;
          continue;
        }
        for (const [id, fields] of res[0]?.[1] ?? []) {
          last = id;
          const event = toEvent(id, fields);
          yield event;
          if (event.kind === 'done' || event.kind === 'error') return;
        }
      }
    } finally {
      signal.removeEventListener('abort', stop);
      reader.disconnect();
    }
  }

  /** Writes what is gathered (shutdown). */
  async close(): Promise<void> {
    await Promise.all([...this.pending.keys()].map((id) => this.flushStream(id)));
  }
}

function toEvent(id: string, fields: string[]): StreamEvent {
  const f: Record<string, string> = {};
  for (let i = 0; i + 1 < fields.length; i += 2) f[fields[i] as string] = fields[i + 1] as string;
  return { seq: Number(id.split('-')[0]), kind: (f['k'] ?? 'chunk') as StreamEventKind, data: f['d'] ?? '' };
}
