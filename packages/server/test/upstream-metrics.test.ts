import type OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';
import { openAiClients } from './helpers/sdk.js';

// gw_upstream_duration_seconds as an operator reads it: a stream's `stream_*` series is its upstream time to its
// end, from the call that opened it, so that it is never shorter than the same stream's time to its first chunk.

let gw: TestGateway;
let a: OpenAI;

beforeAll(async () => {
  gw = await startGateway();
  const key = (await gw.createKey({ rateLimitRpm: 1000 })).key;
  ({ a } = openAiClients(gw, key));
}, 60_000);
afterAll(() => gw?.close());
beforeEach(() => resetProviders(gw.sim));

/** Sum and count of the upstream histogram's series for `provider` and `outcome`. */
async function upstream(provider: string, outcome: string): Promise<{ sum: number; count: number }> {
  const text = await (await fetch(`${gw.url}/metrics`)).text();
  const read = (what: string) => {
    const line = text.split('\n').find((l) => l.startsWith(`gw_upstream_duration_seconds_${what}{provider="${provider}",outcome="${outcome}"}`));
    return Number(line?.split(' ').at(-1) ?? 0);
  };
  return { sum: read('sum'), count: read('count') };
}

describe('upstream time of a stream', () => {
  it('to its end counts from the call, its time to the first chunk included', async () => {
    // 400 ms to the first chunk, then chunks without a wait: the stream's upstream time is about 0.4 s, not its tail.
    gw.sim.providers.nebius?.configure({ latencyMs: 0, ttftMs: 400, chunkGapMs: 0 });
    const firstBefore = await upstream('nebius', 'ok');
    const endBefore = await upstream('nebius', 'stream_ok');
    const stream = await a.chat.completions.create(
      { model: 'qwen/qwen3-32b', messages: [{ role: 'user', content: 'Bonjour' }], stream: true },
      { headers: { 'X-Gateway-Provider': 'nebius' } },
    );
    for await (const _ of stream);
    const first = await upstream('nebius', 'ok');
    let end = await upstream('nebius', 'stream_ok');
    // The stream's end is observed as its session closes, just after the client read its last event.
    for (let i = 0; i < 50 && end.count === endBefore.count; i++) {
      await new Promise((r) => setTimeout(r, 20));
      end = await upstream('nebius', 'stream_ok');
    }
    expect(first.count).toBe(firstBefore.count + 1);
    expect(end.count).toBe(endBefore.count + 1);
    const toFirst = first.sum - firstBefore.sum;
    const toEnd = end.sum - endBefore.sum;
    expect(toFirst).toBeGreaterThanOrEqual(0.39);
    expect(toEnd).toBeGreaterThanOrEqual(toFirst);
  });
});
