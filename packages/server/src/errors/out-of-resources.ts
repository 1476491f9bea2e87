import { GatewayError, SEND_AGAIN } from './gateway-error.js';

/**
 * What this process, not the provider or the client, ran out of, by the error's code: file descriptors (the
 * process's limit, `ulimit -n`, or the system's), local ports, kernel buffers, memory, disk.
 */
const SHORTAGES: Readonly<Record<string, string>> = {
  EMFILE: "file descriptors (the process's limit, ulimit -n)",
  ENFILE: "file descriptors (the system's limit)",
  EADDRNOTAVAIL: 'local ports',
  ENOBUFS: 'kernel buffers',
  ENOMEM: 'memory',
  ENOSPC: 'disk space',
  EDQUOT: 'disk quota',
};

/**
 * `err` as the instance's own want of a resource while it tried `doing` (open a connection, keep an upload): 503
 * `out_of_resources` with `Retry-After: 1`, never the provider's fault nor an internal error; null for any other error.
 */
export function outOfResources(doing: string, err: unknown): GatewayError | null {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code !== 'string' || !Object.hasOwn(SHORTAGES, code)) return null;
  return new GatewayError('out_of_resources', `This gateway instance could not ${doing}: it is out of ${SHORTAGES[code]} (${code})${SEND_AGAIN}`, {
    retryAfterS: 1,
    cause: err,
  });
}

/**
 * A provider's answer past the instance's bound of bodies and answers held at once (GW_BODY_MEMORY_MB, http/body-memory.ts):
 * not read, and not asked of another provider, whose answer would be as large.
 */
export class AnswerOverBound extends GatewayError {
  constructor(held: number, limit: number) {
    const mib = (bytes: number) => (bytes / 1024 / 1024).toFixed(1);
    super(
      'out_of_resources',
      `This gateway instance holds ${mib(held)} MiB of request bodies and answers, its bound of ${mib(limit)} MiB (GW_BODY_MEMORY_MB): the provider's answer was not read${SEND_AGAIN}`,
      { retryAfterS: 1 },
    );
  }
}
