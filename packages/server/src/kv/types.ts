/** Messages between gateway instances (key revocations, key changes). */
export interface Bus {
  publish(channel: string, message: string): Promise<void>;
  subscribe(channel: string, handler: (message: string) => void): Promise<void>;
  /** Called each time the subscriptions are renewed after a lost connection: what was published meanwhile was missed. */
  onResubscribe(handler: () => void): void;
  /** Called each time the publishing connection is back after it was lost: what failed to publish can be sent now. */
  onPublishReady(handler: () => void): void;
  close(): Promise<void>;
}
