import { randomBytes } from 'node:crypto';
import { ALIVE_EVERY_MS, ALIVE_TTL_MS } from '../kv/instance-presence.js';
import type { InstanceRepo } from './types.js';

/**
 * Without Redis, instances sharing PostgreSQL say there that they are alive, as they do in Redis otherwise
 * (instance-presence.ts): every 2 s for 6 s, by the database's clock. A keyed stream's stored answer names the
 * instance relaying it, so that a repeat elsewhere can tell one whose instance died (it will never end) from one
 * still running.
 */
export class StorePresence {
  readonly id = randomBytes(9).toString('base64url');
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly instances: InstanceRepo) {
    this.timer = setInterval(() => this.sayAlive(), ALIVE_EVERY_MS);
    this.timer.unref();
  }

  /** The first word, awaited at start so that this instance's first stream is not taken for a dead one's. */
  start(): Promise<void> {
    return this.sayAlive();
  }

  private sayAlive(): Promise<void> {
    return this.instances.sayAlive(this.id, ALIVE_TTL_MS).catch(() => {});
  }

  /** Whether `id` said it is alive less than 6 s ago (this instance always is). */
  async alive(id: string): Promise<boolean> {
    return id === this.id || this.instances.isAlive(id);
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    await this.instances.leave(this.id).catch(() => {});
  }
}
