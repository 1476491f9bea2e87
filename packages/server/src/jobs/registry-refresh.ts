import { LIST_RETRY_FIRST_S, type ModelRegistry, type RebuildReport } from '../routing/registry.js';

export const LIST_RETRY_MAX_S = 300;

/**
 * Rebuilds the registry every `intervalS`; returns a stop function. While a
 * provider's model list cannot be read (a provider down at start has no
 * last list to keep, so its models are missing), the rebuild comes again
 * after 5 s, then 10, 20… up to 5 minutes, rather than after the whole
 * interval (6 hours by default), whichever rebuild (scheduled or asked
 * for through the admin API) found it unreadable.
 */
export function scheduleRegistryRebuild(
  registry: ModelRegistry,
  intervalS: number,
  onError: (err: unknown) => void,
  first: RebuildReport | null = null,
): () => void {
  let timer: NodeJS.Timeout | null = null;
  let stopped = false;
  let failedRounds = 0;
  const schedule = (report: RebuildReport | null) => {
    if (stopped) return;
    if (timer) clearTimeout(timer);
    const failing = report === null || Object.values(report.providers).some((status) => status !== 'ok');
    failedRounds = failing ? failedRounds + 1 : 0;
    const waitS = failing ? Math.min(intervalS, LIST_RETRY_MAX_S, LIST_RETRY_FIRST_S * 2 ** Math.min(failedRounds - 1, 16)) : intervalS;
    timer = setTimeout(run, waitS * 1000);
    timer.unref();
  };
  const run = () => {
    // A rebuild that ends schedules the next through onRebuilt (below); one that throws, here.
    registry.rebuild().catch((err: unknown) => {
      onError(err);
      schedule(null);
    });
  };
  // Every rebuild, the admin API's too, sets the next: a list an admin rebuild found unreadable is asked again soon.
  registry.onRebuilt(schedule);
  // Without a first report, the first rebuild comes after the interval, as it always did.
  if (first) schedule(first);
  else {
    timer = setTimeout(run, intervalS * 1000);
    timer.unref();
  }
  return () => {
    stopped = true;
    if (timer) clearTimeout(timer);
  };
}
