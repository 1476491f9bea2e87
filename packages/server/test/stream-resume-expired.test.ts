import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { eventually } from './helpers/gateway.js';
import { type SharedInstances, sharedInstancesPerFile } from './helpers/shared-instances.js';
import { readSse, type SseEvent, streamRequest } from './helpers/sse.js';

let shared: SharedInstances;
sharedInstancesPerFile(2, (started) => {
  shared = started;
});

// Long enough (about 15 MB) that a resume whose client stops reading is far behind in the shared buffer.
const ANSWER_TOKENS = 50_000;
const body = { model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'A very long answer' }], stream: true };

describe('a resume read from the shared buffer', () => {
  it('whose buffer expires before it reaches the end ends with an error event, not a clean end that stops short', async () => {
    const [one, two] = shared.gws as [NonNullable<SharedInstances['gws'][0]>, NonNullable<SharedInstances['gws'][0]>];
    for (const p of Object.values(shared.sim.providers)) p.configure({ answerTokens: ANSWER_TOKENS, chunkGapMs: 0 });
    const { key } = await one.createKey({ rateLimitRpm: 1000 });
    const first = await streamRequest(one.baseA, key, body);
    const streamId = first.headers.get('x-request-id') as string;
    const head = await readSse(first, 3);
    // The rest from another instance, not read while the stream ends upstream: the read from the buffer waits.
    const resumed = await streamRequest(two.baseA, key, body, { 'Last-Event-ID': head[2]?.id as string });
    expect(resumed.status).toBe(200);
    await eventually(async () => {
      await one.gateway.services.usage.flush();
      expect(await one.gateway.services.store.usage.list({ requestId: streamId })).toHaveLength(1);
    }, 20_000);
    // Its buffer's expiry runs out meanwhile (the 10 s linger after another client took the end, or the retention).
    const client = new Redis(shared.redis.url);
    try {
      await eventually(async () => expect(await client.ttl(`gw:stream:{${streamId}}:events`)).toBeGreaterThan(0));
      await client.pexpire(`gw:stream:{${streamId}}:events`, 1);
      await client.pexpire(`gw:stream:{${streamId}}:meta`, 1);
    } finally {
      client.disconnect();
    }
    const rest: SseEvent[] = await readSse(resumed);
    const last = rest.at(-1) as SseEvent;
    // It stopped short of the stream's end (ANSWER_TOKENS chunks), and says so where it stops, without an id.
    expect(rest.length).toBeLessThan(ANSWER_TOKENS);
    expect(last.id).toBeUndefined();
    expect(JSON.parse(last.data)).toMatchObject({ error: { code: 'stream_not_found' } });
    expect(rest.some((e) => e.data === '[DONE]')).toBe(false);
  }, 60_000);
});
