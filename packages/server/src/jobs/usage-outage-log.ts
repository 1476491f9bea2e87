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

/** The distinct failures one outage warns of: past these, a new one goes to debug too. */
const WARNED_MAX = 8;

/**
 * What the log says of the usage writes through a database outage, which fails every flush twice a second: a
 * warning for each distinct failure (the database's, and the spill's when its disk is full too: each flush then
 * fails twice, alternately, and warning whenever the message changed wrote two lines a second), the first spill to
 * disk, and one line when it ends; each retry and later spill at debug only, so that an hour's outage is a few
 * lines rather than 14,000.
 */
export function usageOutageLog(log: OutageLogger, spillDir: string | undefined): Pick<UsageWriterOptions, 'onError' | 'onRecovered' | 'onSpill'> {
  const warned = new Set<string>();
  let failures = 0;
  let spilled = 0;
  return {
    onError: (err) => {
      failures++;
      const { message } = errorSummary(err);
      const known = warned.has(message) || warned.size >= WARNED_MAX;
      if (known) log.debug({ err: errorSummary(err) }, 'usage write failed again; records kept for retry');
      else {
        warned.add(message);
        log.warn({ err: errorSummary(err) }, 'usage write failed; records kept and retried every 500 ms (the same failure again is logged at debug)');
      }
    },
    onRecovered: () => {
      const put = spilled > 0 ? `; ${spilled} records put in ${spillDir} meanwhile are stored from there` : '';
      log.info(`usage writes succeed again after ${failures} failed attempts${put}`);
      warned.clear();
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
