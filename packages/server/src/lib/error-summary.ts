import { redactSecrets } from './redact.js';

/**
 * An error as a log line should carry it. A failed database query's error
 * (Drizzle's) repeats the whole statement and its parameters in its
 * message (kilobytes of usage rows, key hashes) and keeps the reason (a
 * refused connection, an overflow) only in its cause: the line gets the
 * reason, and the statement's first words to say which one failed.
 */
export function errorSummary(err: unknown): { message: string; code?: string; stack?: string } {
  if (!(err instanceof Error)) return { message: redactSecrets(String(err)) };
  const cause = err.cause instanceof Error ? (err.cause as Error & { code?: unknown }) : null;
  if (cause && err.message.startsWith('Failed query:')) {
    const statement = err.message.slice('Failed query:'.length).trim().split(/\s+/).slice(0, 4).join(' ');
    return {
      message: redactSecrets(`database query failed (${statement} …): ${cause.message}`),
      ...(typeof cause.code === 'string' ? { code: cause.code } : {}),
    };
  }
  const code = (err as { code?: unknown }).code;
  // The message (and the stack, which repeats it) as any text the gateway writes: an unexpected error may carry what
  // it was given (a URL with its password, a provider's key, a client's key), which the line must not.
  return {
    message: redactSecrets(err.message),
    ...(typeof code === 'string' ? { code } : {}),
    ...(err.stack ? { stack: redactSecrets(err.stack) } : {}),
  };
}

/**
 * A promise's `catch` for a write whose failure is only worth a warning: the error is logged summarised (a raw
 * error object may carry user content: a Redis reply error's command arguments, a query's parameters).
 */
export function warnOnFailure(log: { warn(obj: object, msg: string): void }, message: string): (err: unknown) => void {
  return (err) => log.warn({ err: errorSummary(err) }, message);
}
