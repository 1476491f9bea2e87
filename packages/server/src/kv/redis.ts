import { Redis, type RedisOptions } from 'ioredis';
import type { Bus } from './types.js';

/**
 * Options for the request-path client: no offline queue and no retries per
 * command, so a dead Redis fails a call at once instead of queueing it
 * (the limiter then fails open). Reconnects back off instead of storming.
 */
export const FAST_FAIL_OPTIONS: RedisOptions = {
  enableOfflineQueue: false,
  maxRetriesPerRequest: 0,
  commandTimeout: 50,
  lazyConnect: true,
  connectTimeout: 1000,
  retryStrategy: (times) => Math.min(100 * 2 ** Math.min(times, 6), 2000),
};

export async function connectRedis(url: string, options: RedisOptions = FAST_FAIL_OPTIONS): Promise<Redis> {
  const client = new Redis(url, options);
  // Errors are expected while Redis is away; callers see failed commands, not crashes.
  client.on('error', () => {});
  try {
    await client.connect();
  } catch {
    // Start anyway: the client keeps reconnecting, and callers fail open meanwhile.
  }
  return client;
}

/** Pub/sub over Redis, so that every instance hears a revocation within milliseconds. */
export class RedisBus implements Bus {
  private constructor(
    private readonly pub: Redis,
    private readonly sub: Redis,
  ) {}

  static async connect(url: string): Promise<RedisBus> {
    const pub = await connectRedis(url, { ...FAST_FAIL_OPTIONS, commandTimeout: 500 });
    const sub = await connectRedis(url, { ...FAST_FAIL_OPTIONS, enableOfflineQueue: true, commandTimeout: undefined });
    return new RedisBus(pub, sub);
  }

  async publish(channel: string, message: string): Promise<void> {
    await this.pub.publish(channel, message);
  }

  async subscribe(channel: string, handler: (message: string) => void): Promise<void> {
    this.sub.on('message', (ch: string, msg: string) => {
      if (ch === channel) handler(msg);
    });
    await this.sub.subscribe(channel);
  }

  async close(): Promise<void> {
    this.pub.disconnect();
    this.sub.disconnect();
  }
}
