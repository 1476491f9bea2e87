import { stat } from 'node:fs';
import type { Socket } from 'node:net';
import { type RedisServer, startRedis } from '@gw/testkit';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BATCHING_OPTIONS, connectRedis, FAST_FAIL_OPTIONS } from '../src/kv/redis.js';
import { eventually } from './helpers/gateway.js';

let server: RedisServer;
let redis: Redis;

beforeAll(async () => {
  server = await startRedis();
  redis = await connectRedis(server.url, { ...FAST_FAIL_OPTIONS, commandTimeout: 50 });
});

afterAll(async () => {
  redis?.disconnect();
  await server?.stop();
});

describe('the request-path Redis client times commands out, tolerating event-loop stalls', () => {
  it('fails every command to a Redis that does not answer after about the timeout, and answers again once it does', async () => {
    server.pause();
    const started = performance.now();
    const outcomes = await Promise.allSettled([redis.ping(), redis.get('a'), redis.incr('b')]);
    const took = performance.now() - started;
    server.resume();
    expect(outcomes.map((o) => (o.status === 'rejected' ? (o.reason as Error).message : 'ok'))).toEqual([
      'Command timed out',
      'Command timed out',
      'Command timed out',
    ]);
    expect(took).toBeGreaterThanOrEqual(45);
    expect(took).toBeLessThan(1_000);
    // Three in a row with no reply between: the connection is taken for dead and made anew.
    await eventually(async () => expect(await redis.ping()).toBe('PONG'), 5000);
  });

  it('takes a connection on which commands keep timing out for dead: it reconnects, and commands fail at once meanwhile', async () => {
    const reconnects: string[] = [];
    redis.on('reconnecting', () => reconnects.push('reconnecting'));
    server.pause();
    try {
      await Promise.allSettled([redis.get('x'), redis.get('y'), redis.get('z')]);
      // The connection is dropped (then made anew, after a back-off): waited for by its event, with room for a loaded machine.
      await eventually(() => expect(reconnects.length).toBeGreaterThan(0), 5000);
      expect(redis.status).not.toBe('ready');
      const started = performance.now();
      await expect(redis.get('w')).rejects.toThrow();
      expect(performance.now() - started).toBeLessThan(40);
    } finally {
      server.resume();
    }
    await eventually(async () => expect(await redis.ping()).toBe('PONG'), 5000);
    expect(reconnects.length).toBeGreaterThan(0);
  });

  it('does not fail a command whose reply came while the event loop was stalled past the timeout', async () => {
    const pending = redis.set('stalled', '1');
    // The command is on the wire at once; its reply arrives during the 150 ms stall, read only after it.
    await new Promise<void>((resolve) =>
      setImmediate(() => {
        const until = performance.now() + 150;
        while (performance.now() < until) {
          // The event loop is held.
        }
        resolve();
      }),
    );
    await expect(pending).resolves.toBe('OK');
    const many = await Promise.all(Array.from({ length: 200 }, (_, i) => redis.set(`k${i}`, String(i))));
    expect(many.every((r) => r === 'OK')).toBe(true);
  });

  it('does not fail a command that fell due during a long turn of the loop, when its reply came during that turn', async () => {
    // A burst of requests is read in one long turn of the event loop, which the timer of an earlier command (settled)
    // may precede. A command that falls due during that turn, and whose reply came during it, has its reply read only
    // in the next turn: it did not time out. Under a 450-request burst such false timeouts dropped the connection,
    // and the limiter failed open while Redis answered in milliseconds.
    const client = await connectRedis(server.url, { ...FAST_FAIL_OPTIONS, commandTimeout: 500 });
    const hold = (ms: number) => {
      const until = performance.now() + ms;
      while (performance.now() < until) {
        // The event loop is held.
      }
    };
    const t0 = performance.now();
    const at = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms - (performance.now() - t0)));
    try {
      await client.ping(); // its timer fires at about t0 + 500, though it is settled
      // Sent at t0 + 300, due at t0 + 800; Redis answers at about t0 + 650.
      const late = at(300).then(() => client.blpop('gw-test-late', 0.35));
      const turn = at(440).then(
        () =>
          new Promise<void>((resolve) =>
            setImmediate(() => {
              // Ready during this hold, read in the next turn's poll: after the earlier command's timer has fired.
              stat('/', () => {
                hold(540); // the long turn, until about t0 + 1100
                resolve();
              });
              hold(560 - (performance.now() - t0));
            }),
          ),
      );
      await turn;
      await expect(late).resolves.toBeNull();
    } finally {
      client.disconnect();
    }
  });
});

describe('when a command goes on the wire', () => {
  const stream = (client: Redis) => client.stream as Socket;
  const written = (client: Redis) => stream(client).bytesWritten;

  it('the request-path client writes the commands of one run of code together, as soon as that code returns', async () => {
    const socket = stream(redis);
    const pending = Promise.all([redis.incr('request-path'), redis.incr('request-path')]);
    // Held together while the code that issued them runs…
    expect(socket.writableCorked).toBe(1);
    expect(socket.writableLength).toBeGreaterThan(0);
    // …and in the kernel's hands before anything else runs: nothing waits for a later turn of the event loop.
    await new Promise((resolve) => process.nextTick(resolve));
    expect(socket.writableCorked).toBe(0);
    expect(socket.writableLength).toBe(0);
    expect(await pending).toEqual([1, 2]);
  });

  it('the batching client (the resume buffer) holds the commands of one turn and writes them together', async () => {
    const batching = await connectRedis(server.url, BATCHING_OPTIONS);
    try {
      const before = written(batching);
      const pending = Promise.all([batching.incr('batched'), batching.incr('batched')]);
      expect(written(batching)).toBe(before);
      expect(await pending).toEqual([1, 2]);
      expect(written(batching)).toBeGreaterThan(before);
    } finally {
      batching.disconnect();
    }
  });
});
