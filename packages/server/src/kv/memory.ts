import { EventEmitter } from 'node:events';
import type { Bus } from './types.js';

/** In-process bus: one instance only, so a publish reaches this process's subscribers. */
export class MemoryBus implements Bus {
  private readonly emitter = new EventEmitter();

  /** The subscribers run before this returns, as their count says. */
  async publish(channel: string, message: string): Promise<number> {
    this.emitter.emit(channel, message);
    return this.emitter.listenerCount(channel);
  }

  publishAwaited(channel: string, message: string): Promise<number> {
    return this.publish(channel, message);
  }

  async subscribe(channel: string, handler: (message: string) => void): Promise<void> {
    this.emitter.on(channel, handler);
  }

  /** One process: there is no connection to lose. */
  onResubscribe(): void {}

  deafSince(): null {
    return null;
  }

  onPublishReady(): void {}

  async close(): Promise<void> {
    this.emitter.removeAllListeners();
  }
}
