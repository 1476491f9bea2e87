/** How many upstream calls to `provider` the gateway's /metrics counts, by outcome (gw_upstream_duration_seconds_count). */
export async function upstreamOutcomes(gatewayUrl: string, provider: string): Promise<Record<string, number>> {
  const text = await (await fetch(`${gatewayUrl}/metrics`)).text();
  const out: Record<string, number> = {};
  for (const line of text.split('\n')) {
    const m = line.match(/^gw_upstream_duration_seconds_count\{(.*)\} (\d+)$/);
    if (!m?.[1]?.includes(`provider="${provider}"`)) continue;
    out[m[1].match(/outcome="([^"]+)"/)?.[1] as string] = Number(m[2]);
  }
  return out;
}
