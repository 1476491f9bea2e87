/** Messages between gateway instances (key revocations, key changes). */
export interface Bus {
  /** Resolves with how many subscriber connections (of every instance) received the message. */
  publish(channel: string, message: string): Promise<number>;
  subscribe(channel: string, handler: (message: string) => void): Promise<void>;
  /** Called each time the subscriptions are renewed after a lost connection: what was published meanwhile was missed. */
  onResubscribe(handler: () => void): void;
  /** Called each time the publishing connection is back after it was lost: what failed to publish can be sent now. */
  onPublishReady(handler: () => void): void;
  close(): Promise<void>;
}
