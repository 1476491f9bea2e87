/** Resolves in a later turn of the event loop, once the I/O waiting now has been handled. */
function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/**
 * Calls `each` on every item in order, `perTurn` items at a time, letting
 * the event loop run between: work that grows with a batch (a flush's
 * rows) then delays no request by more than one slice. A throw of `each`
 * rejects, with the items after it left alone.
 */
export async function forEachInTurns<T>(items: readonly T[], perTurn: number, each: (item: T) => void): Promise<void> {
  for (let i = 0; i < items.length; i++) {
    if (i > 0 && i % perTurn === 0) await nextTurn();
    each(items[i] as T);
  }
}
