/** Messages between gateway instances (key revocations, key changes). */
export interface Bus {
  /**
   * Resolves with how many subscriber connections (of every instance) received the message. Best effort: a slow reply
   * is waited for (the caller bounds its own wait), and the message is dropped at once while too many wait.
   */
  publish(channel: string, message: string): Promise<number>;
  /**
   * {@link publish} for a caller that bounds the wait itself (an admin change): a slow reply is waited for rather
   * than failed after the request path's command timeout. Rejects when the message was not sent, or its connection lost.
   */
  publishAwaited(channel: string, message: string): Promise<number>;
  subscribe(channel: string, handler: (message: string) => void): Promise<void>;
  /** Called each time the subscriptions are renewed after a lost connection: what was published meanwhile was missed. */
  onResubscribe(handler: () => void): void;
  /**
   * Since when (`steadyMs()`, lib/clock.ts) messages published now may not reach this instance: its subscriber connection was lost,
   * or has not subscribed yet. Null while its subscriptions are live.
   */
  deafSince(): number | null;
  /** Called each time the publishing connection is back after it was lost: what failed to publish can be sent now. */
  onPublishReady(handler: () => void): void;
  close(): Promise<void>;
}
