import { type Simulator, startSimulator } from '@gw/simulator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';
import { readSse, streamRequest } from './helpers/sse.js';

// A workspace's enabledModels narrowed while its keys' streams and keyed requests of the model run.
let sim: Simulator;
let gw: TestGateway;

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  gw = await startGateway({ sim });
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await sim?.close();
});

const MODEL = 'mistral/small';
const body = { model: MODEL, messages: [{ role: 'user', content: 'one two three four five six seven eight nine ten' }], stream: true, max_tokens: 16 };
const code = async (res: Response) => ((await res.json()) as { error: { code: string } }).error.code;

describe('a model a workspace stops enabling while its streams run', () => {
  for (const [variant, status] of [
    ['a', 404],
    ['b', 400],
  ] as const) {
    it(`refuses new requests (${status} model_not_found in ${variant.toUpperCase()}), while the key still resumes its stream begun before, as it replays a keyed answer`, async () => {
      const base = variant === 'a' ? gw.baseA : gw.baseB;
      const ws = await gw.admin<{ id: string }>('POST', '/workspaces', { name: `narrowed-${variant}`, enabledModels: [MODEL, 'mistral/large'] });
      const { key } = await gw.createKey({ workspaceId: ws.body.id, rateLimitRpm: 1000 });
      const other = (await gw.createKey({ workspaceId: ws.body.id, rateLimitRpm: 1000 })).key;
      // Slow enough that the stream is still running when the workspace changes.
      sim.providers.mistral?.configure({ chunkGapMs: 40 });
      sim.providers.scaleway?.configure({ chunkGapMs: 40 });
      try {
        const started = await streamRequest(base, key, body);
        expect(started.status).toBe(200);
        const head = await readSse(started, 3);
        const lastSeen = head[2]?.id as string;
        const keyed = await streamRequest(base, key, { ...body, stream: false }, { 'X-Idempotency-Key': `narrowed-${variant}` });
        expect(keyed.status).toBe(200);
        const large = await streamRequest(base, key, { ...body, model: 'mistral/large' });
        const largeId = (await readSse(large, 1))[0]?.id as string;
        expect((await gw.admin('PATCH', `/workspaces/${ws.body.id}`, { enabledModels: ['mistral/large'] })).status).toBe(200);

        const fresh = await streamRequest(base, key, body);
        expect([fresh.status, await code(fresh)]).toEqual([status, 'model_not_found']);
        // What was paid for is read without a new upstream call: the keyed answer replayed, the stream resumed.
        const replayed = await streamRequest(base, key, { ...body, stream: false }, { 'X-Idempotency-Key': `narrowed-${variant}` });
        expect([replayed.status, replayed.headers.get('idempotent-replayed')]).toEqual([200, 'true']);
        const resumed = await streamRequest(base, key, { ...body, model: `${MODEL}:eu` }, { 'Last-Event-ID': lastSeen });
        expect(resumed.status).toBe(200);
        expect(resumed.headers.get('x-ratelimit-remaining')).not.toBeNull();
        const rest = await readSse(resumed);
        expect(rest[0]?.id).toBe(lastSeen.replace(/:3$/, ':4'));
        expect(rest.at(-1)?.data).toBe('[DONE]');
        // Nothing else is resumed under the model's name: another key's stream, another model's, an unknown one.
        const foreign = await streamRequest(base, other, body, { 'Last-Event-ID': lastSeen });
        expect([foreign.status, await code(foreign)]).toEqual([status, 'model_not_found']);
        for (const id of [largeId, lastSeen.replace(/req_\w+/, 'req_0123456789abcdef0123456789ab'), 'nope']) {
          const refused = await streamRequest(base, key, body, { 'Last-Event-ID': id });
          expect([id, refused.status, await code(refused)]).toEqual([id, status, 'model_not_found']);
        }
      } finally {
        sim.providers.mistral?.configure({ chunkGapMs: 0 });
        sim.providers.scaleway?.configure({ chunkGapMs: 0 });
      }
    });
  }

  it('counts a repeat of a keyed request against the rate limit after the model is no longer enabled, as before', async () => {
    const ws = await gw.admin<{ id: string }>('POST', '/workspaces', { name: 'narrowed-limit', enabledModels: [MODEL] });
    const { key } = await gw.createKey({ workspaceId: ws.body.id, rateLimitRpm: 2 });
    const keyed = { ...body, stream: false };
    const headers = { 'X-Idempotency-Key': 'narrowed-limit' };
    expect((await streamRequest(gw.baseA, key, keyed, headers)).status).toBe(200);
    expect((await gw.admin('PATCH', `/workspaces/${ws.body.id}`, { enabledModels: ['mistral/large'] })).status).toBe(200);
    const replayed = await streamRequest(gw.baseA, key, keyed, headers);
    expect([replayed.status, replayed.headers.get('idempotent-replayed'), replayed.headers.get('x-ratelimit-remaining')]).toEqual([200, 'true', '0']);
    const limited = await streamRequest(gw.baseA, key, keyed, headers);
    expect([limited.status, await code(limited)]).toEqual([429, 'rate_limit_exceeded']);
  });
});
