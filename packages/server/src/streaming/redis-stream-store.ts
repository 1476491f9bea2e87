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

/**
 * The resume buffer in Redis Streams, shared by every instance: entry ids
 * are `<seq>-1`, so "after event N" is an exclusive range. Keys expire a
 * while after the stream ends (or after the grace period if it never does).
 */
export class RedisStreamStore implements StreamStore {
  constructor(
    private readonly redis: Redis,
    private readonly graceS: number,
  ) {}

  async create(streamId: string, meta: StreamMeta): Promise<void> {
    const ttl = this.graceS + STREAM_RETENTION_S;
    await this.redis.multi().hset(metaKey(streamId), 'keyId', meta.keyId, 'model', meta.model).expire(metaKey(streamId), ttl).exec();
  }

  append(streamId: string, event: StreamEvent): void {
    const ttl = event.kind === 'done' || event.kind === 'error' ? STREAM_RETENTION_S : this.graceS + STREAM_RETENTION_S;
    const args = [eventsKey(streamId), 'MAXLEN', '~', MAX_STREAM_EVENTS, `${event.seq}-1`, 'k', event.kind, 'd', event.data] as const;
    // Resume from this buffer degrades if a write fails; the live stream goes on.
    const ignore = () => {};
    if (event.seq !== 1 && ttl !== STREAM_RETENTION_S) {
      // Most events: one command, no transaction around it.
      this.redis.xadd(...args).catch(ignore);
      return;
    }
    this.redis
      .multi()
      .xadd(...args)
      .expire(eventsKey(streamId), ttl)
      .expire(metaKey(streamId), ttl)
      .exec()
      .catch(ignore);
  }

  async meta(streamId: string): Promise<StreamMeta | null> {
    const m = await this.redis.hgetall(metaKey(streamId));
    return m['keyId'] ? { keyId: m['keyId'], model: m['model'] ?? '' } : null;
  }

  delivered(streamId: string): void {
    // LT only shortens a TTL (Redis 7); an older Redis refuses it and the longer TTL stays.
    this.redis
      .multi()
      .expire(eventsKey(streamId), DELIVERED_LINGER_S, 'LT')
      .expire(metaKey(streamId), DELIVERED_LINGER_S, 'LT')
      .exec()
      .catch(() => {});
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

  async close(): Promise<void> {}
}

function toEvent(id: string, fields: string[]): StreamEvent {
  const f: Record<string, string> = {};
  for (let i = 0; i + 1 < fields.length; i += 2) f[fields[i] as string] = fields[i + 1] as string;
  return { seq: Number(id.split('-')[0]), kind: (f['k'] ?? 'chunk') as StreamEventKind, data: f['d'] ?? '' };
}
