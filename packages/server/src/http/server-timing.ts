/** The Server-Timing value every answer carries: the gateway's own time apart from the upstream's (ms). */
export function serverTiming(totalMs: number, upstreamMs: number): string {
  return `gw;desc="gateway";dur=${(totalMs - upstreamMs).toFixed(2)}, upstream;dur=${upstreamMs.toFixed(2)}, total;dur=${totalMs.toFixed(2)}`;
}
