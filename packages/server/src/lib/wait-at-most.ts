/**
 * Waits for `work` to settle, or `ms`, whichever comes first; `work` goes on either way (nothing is cancelled), and
 * a rejection is the caller's to handle: for steps a start or a rebuild may go past (a stalled Redis, a slow store).
 */
export async function waitAtMost(work: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, ms);
  });
  try {
    await Promise.race([work, late]);
  } finally {
    clearTimeout(timer);
  }
}
