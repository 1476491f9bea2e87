import { startRedis } from '@gw/testkit';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { InstancePresence } from '../src/kv/instance-presence.js';
import { decodeEvents, encodeEvents } from '../src/streaming/event-batch.js';
import { APPEND_COALESCE_MS, RedisStreamStore } from '../src/streaming/redis-stream-store.js';
import { DELIVERED_LINGER_S, STREAM_RETENTION_S, type StreamEvent, SYNTHETIC_SEQ } from '../src/streaming/types.js';
import { useRedis } from './helpers/redis.js';

const fixture = useRedis();

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const chunk = (seq: number, data = `{"n":${seq}}`): StreamEvent => ({ seq, kind: 'chunk', data });
const done = (seq: number): StreamEvent => ({ seq, kind: 'done', data: '[DONE]' });
const eventsKey = (id: string) => `gw:stream:{${id}}:events`;

async function followAll(store: RedisStreamStore, id: string, afterSeq: number): Promise<StreamEvent[]> {
  const out: StreamEvent[] = [];
  for await (const e of store.follow(id, afterSeq, AbortSignal.timeout(5000))) out.push(e);
  return out;
}

/** How many times Redis has run one command so far (INFO commandstats). */
async function commandCalls(name: string): Promise<number> {
  const info = await fixture.redis.info('commandstats');
  return Number(new RegExp(`cmdstat_${name}:calls=(\\d+)`).exec(info)?.[1] ?? 0);
}

describe('a batch of events as one string', () => {
  const tricky: StreamEvent[] = [
    { seq: 3, kind: 'chunk', data: '{"content":"line one\\nline two"}' },
    { seq: 4, kind: 'chunk', data: 'a raw\nnewline, 12 34 spaces and digits\n' },
    { seq: 5, kind: 'chunk', data: '{"content":"Grüße, 東京, 🦊"}' },
    { seq: 6, kind: 'usage', data: '' },
    { seq: 7, kind: 'error', data: '{"error":{"message":"x"}}' },
    { seq: 8, kind: 'done', data: '[DONE]' },
  ];

  it('decodes to exactly what was encoded, whatever the data holds', () => {
    expect(decodeEvents(encodeEvents(tricky))).toEqual(tricky);
    expect(decodeEvents('')).toEqual([]);
  });

  it('keeps its lengths through Redis, multi-byte characters included', async () => {
    await fixture.redis.xadd('batch-roundtrip', '8-1', 'e', encodeEvents(tricky));
    const [[, fields]] = (await fixture.redis.xrange('batch-roundtrip', '-', '+')) as [string, string[]][];
    expect(decodeEvents(fields[1] as string)).toEqual(tricky);
  });

  it('refuses text it did not write', () => {
    expect(() => decodeEvents('garbage')).toThrow(/unreadable/);
    expect(() => decodeEvents('1 chunk 99\nshort')).toThrow(/unreadable/);
    expect(() => decodeEvents('1 other 2\nab')).toThrow(/unreadable/);
  });
});

describe('the Redis resume buffer', () => {
  it('writes the first event at once and the rest as one entry per tick, resumable from inside an entry', async () => {
    const store = new RedisStreamStore(fixture.redis, 60, new InstancePresence(fixture.redis));
    const id = 'batched';
    await store.create(id, { keyId: 'key_1', model: 'm' });
    store.append(id, chunk(1));
    for (let seq = 2; seq <= 6; seq++) store.append(id, chunk(seq));
    await sleep(APPEND_COALESCE_MS * 4);
    const entries = (await fixture.redis.xrange(eventsKey(id), '-', '+')).map(([entryId]) => entryId);
    expect(entries).toEqual(['1-1', '6-1']);
    store.append(id, chunk(7));
    store.append(id, done(8));
    await sleep(APPEND_COALESCE_MS * 4);
    expect(await fixture.redis.xlen(eventsKey(id))).toBe(3);
    // Not delivered: the full retention.
    expect(await fixture.redis.ttl(eventsKey(id))).toBeGreaterThan(STREAM_RETENTION_S - 30);
    expect(await store.meta(id)).toEqual({ keyId: 'key_1', model: 'm' });
    // After event 3, inside the entry 2..6: exactly 4 to 8.
    expect((await followAll(store, id, 3)).map((e) => e.seq)).toEqual([4, 5, 6, 7, 8]);
    expect((await followAll(store, id, 0)).map((e) => e.seq)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    expect((await followAll(store, id, 7)).map((e) => e.kind)).toEqual(['done']);
  });

  it('writes again what failed to be written, in order, so a reader elsewhere meets no hole', async () => {
    const client = fixture.redis.duplicate({ enableOfflineQueue: false });
    await new Promise((resolve) => client.once('ready', resolve));
    const store = new RedisStreamStore(client, 60, new InstancePresence(fixture.redis));
    const id = 'written-again';
    try {
      await store.create(id, { keyId: 'key_1', model: 'm' });
      for (let seq = 1; seq <= 3; seq++) store.append(id, chunk(seq));
      await sleep(APPEND_COALESCE_MS * 3);
      // Redis unreachable for a few ticks: every write of the stream fails meanwhile.
      client.disconnect();
      for (let seq = 4; seq <= 6; seq++) {
        store.append(id, chunk(seq));
        await sleep(APPEND_COALESCE_MS * 1.5);
      }
      await client.connect();
      store.append(id, done(7));
      await sleep(APPEND_COALESCE_MS * 4);
      expect((await followAll(store, id, 0)).map((e) => e.seq)).toEqual([1, 2, 3, 4, 5, 6, 7]);
    } finally {
      client.disconnect();
    }
  });

  it('writes the stream’s record again with a later batch when Redis lost it (a restart without persistence)', async () => {
    const store = new RedisStreamStore(fixture.redis, 60, new InstancePresence(fixture.redis));
    const id = 'record-lost';
    await store.create(id, { keyId: 'key_1', model: 'm' });
    for (let seq = 1; seq <= 3; seq++) store.append(id, chunk(seq));
    await sleep(APPEND_COALESCE_MS * 3);
    await fixture.redis.del(eventsKey(id), `gw:stream:{${id}}:meta`);
    for (let seq = 4; seq <= 6; seq++) store.append(id, chunk(seq));
    store.append(id, done(7));
    await sleep(APPEND_COALESCE_MS * 3);
    expect(await store.meta(id)).toEqual({ keyId: 'key_1', model: 'm' });
    expect(await fixture.redis.ttl(`gw:stream:{${id}}:meta`)).toBeGreaterThan(0);
    // After the last event a client had: the rest; from the start, the loss is said, not skipped.
    expect((await followAll(store, id, 3)).map((e) => e.seq)).toEqual([4, 5, 6, 7]);
    expect((await followAll(store, id, 0)).map((e) => e.seq)).toEqual([SYNTHETIC_SEQ]);
  });

  it('ends a resume that meets a hole in the buffer with an error event that has no id, rather than skip the missing events', async () => {
    const store = new RedisStreamStore(fixture.redis, 60, new InstancePresence(fixture.redis));
    const id = 'with-a-hole';
    await fixture.redis.hset(`gw:stream:{${id}}:meta`, 'keyId', 'key_1', 'model', 'm');
    await fixture.redis.xadd(eventsKey(id), '2-1', 'e', encodeEvents([chunk(1), chunk(2)]));
    await fixture.redis.xadd(eventsKey(id), '6-1', 'e', encodeEvents([chunk(5), done(6)]));
    const events = await followAll(store, id, 0);
    expect(events.map((e) => e.seq)).toEqual([1, 2, SYNTHETIC_SEQ]);
    expect(events.at(-1)?.kind).toBe('error');
    expect(events.at(-1)?.data).toContain('missing events 3 to 4');
  });

  it('ends a resume with an error event, not a silent cut, when Redis goes away while it waits', async () => {
    const own = await startRedis();
    const redis = new Redis(own.url);
    redis.on('error', () => {});
    try {
      const presence = new InstancePresence(redis);
      const store = new RedisStreamStore(redis, 60, presence);
      const id = 'redis-goes';
      await store.create(id, { keyId: 'key_1', model: 'm' });
      store.append(id, chunk(1));
      await sleep(APPEND_COALESCE_MS);
      const reading = followAll(store, id, 1);
      await sleep(200);
      await own.kill();
      const events = await reading;
      expect(events.map((e) => [e.seq, e.kind])).toEqual([[SYNTHETIC_SEQ, 'error']]);
      expect(events[0]?.data).toContain('became unreachable');
    } finally {
      redis.disconnect();
      await own.kill();
    }
  });

  it('writes the last batch with the short linger as soon as the client has it all, with no command after it', async () => {
    const store = new RedisStreamStore(fixture.redis, 60, new InstancePresence(fixture.redis));
    const id = 'delivered-early';
    await store.create(id, { keyId: 'key_1', model: 'm' });
    store.append(id, chunk(1));
    // Counted after the first event's write, whose script sets the expiry.
    const expiresBefore = await commandCalls('expire');
    // In one turn of the event loop, so that the store's tick cannot write the batch first.
    store.append(id, chunk(2));
    store.append(id, done(3));
    store.delivered(id);
    const entries = (await fixture.redis.xrange(eventsKey(id), '-', '+')).map(([entryId]) => entryId);
    expect(entries).toEqual(['1-1', '3-1']);
    const ttl = await fixture.redis.ttl(eventsKey(id));
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(DELIVERED_LINGER_S);
    // The two of the write's own script (one per key); none to shorten it afterwards.
    expect(await commandCalls('expire')).toBe(expiresBefore + 2);
    await sleep(APPEND_COALESCE_MS * 3);
    expect(await fixture.redis.xlen(eventsKey(id))).toBe(2);
  });

  it('shortens the expiry of a stream delivered after its last batch was written', async () => {
    const store = new RedisStreamStore(fixture.redis, 60, new InstancePresence(fixture.redis));
    const id = 'delivered-late';
    await store.create(id, { keyId: 'key_1', model: 'm' });
    store.append(id, chunk(1));
    store.append(id, done(2));
    await sleep(APPEND_COALESCE_MS * 4);
    expect(await fixture.redis.ttl(eventsKey(id))).toBeGreaterThan(STREAM_RETENTION_S - 30);
    store.delivered(id);
    await sleep(20);
    expect(await fixture.redis.ttl(eventsKey(id))).toBeLessThanOrEqual(DELIVERED_LINGER_S);
  });

  it('reads entries of one event each, as they were once written', async () => {
    const store = new RedisStreamStore(fixture.redis, 60, new InstancePresence(fixture.redis));
    const id = 'one-per-entry';
    await fixture.redis.hset(`gw:stream:{${id}}:meta`, 'keyId', 'key_1', 'model', 'm');
    await fixture.redis.xadd(eventsKey(id), '1-1', 'k', 'chunk', 'd', '{"n":1}');
    await fixture.redis.xadd(eventsKey(id), '2-1', 'k', 'done', 'd', '[DONE]');
    expect(await followAll(store, id, 0)).toEqual([chunk(1), done(2)]);
  });

  it('writes what is gathered when it closes', async () => {
    const store = new RedisStreamStore(fixture.redis, 60, new InstancePresence(fixture.redis));
    const id = 'closing';
    await store.create(id, { keyId: 'key_1', model: 'm' });
    store.append(id, chunk(1));
    store.append(id, chunk(2));
    await store.close();
    expect((await fixture.redis.xrange(eventsKey(id), '-', '+')).map(([entryId]) => entryId)).toEqual(['1-1', '2-1']);
  });
});
