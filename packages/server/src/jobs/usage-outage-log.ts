import { errorSummary } from '../lib/error-summary.js';
import type { UsageWriterOptions } from './usage-writer.js';

/** A level of the log, as pino's are called here. */
interface LevelLog {
  (obj: object, msg: string): void;
  (msg: string): void;
}

/** The levels of the gateway's log that the outage is told at. */
export interface OutageLogger {
  debug: LevelLog;
  info: LevelLog;
  warn: LevelLog;
}

/**
 * What the log says of the usage writes through a database outage, which fails every flush twice a second: a
 * warning when it begins and when its error changes, the first spill to disk, and one line when it ends; each
 * retry and later spill at debug only, so that an hour's outage is three lines rather than 14,000.
 */
export function usageOutageLog(log: OutageLogger, spillDir: string | undefined): Pick<UsageWriterOptions, 'onError' | 'onRecovered' | 'onSpill'> {
  let failure: string | null = null;
  let failures = 0;
  let spilled = 0;
  return {
    onError: (err) => {
      failures++;
      const { message } = errorSummary(err);
      const same = message === failure;
      failure = message;
      if (same) log.debug({ err: errorSummary(err) }, 'usage write failed again; records kept for retry');
      else log.warn({ err: errorSummary(err) }, 'usage write failed; records kept and retried every 500 ms (the same failure again is logged at debug)');
    },
    onRecovered: () => {
      const put = spilled > 0 ? `; ${spilled} records put in ${spillDir} meanwhile are stored from there` : '';
      log.info(`usage writes succeed again after ${failures} failed attempts${put}`);
      failure = null;
      failures = 0;
      spilled = 0;
    },
    onSpill: (e) => {
      if ('replayed' in e) {
        log.info(`usage: ${e.replayed} records from ${spillDir} stored`);
        return;
      }
      const first = spilled === 0;
      spilled += e.spilled;
      if (first) log.warn(`usage: ${e.spilled} records put in ${spillDir} until the database takes them (and the next ones too)`);
      else log.debug(`usage: ${e.spilled} more records put in ${spillDir}`);
    },
  };
}
