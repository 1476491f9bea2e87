import { type Simulator, startSimulator } from '@gw/simulator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';
import { readSse, streamRequest } from './helpers/sse.js';

// The registry changed under running traffic: a model whose last offer leaves at a rebuild while its streams run.
let sim: Simulator;
let gw: TestGateway;
let key: string;

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  gw = await startGateway({ sim });
  key = (await gw.createKey({ rateLimitRpm: 1000 })).key;
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await sim?.close();
});

const MODEL = 'mistral/large';
const body = { model: MODEL, messages: [{ role: 'user', content: 'one two three four five six seven eight nine ten' }], stream: true, max_tokens: 16 };
const code = async (res: Response) => ((await res.json()) as { error: { code: string } }).error.code;

/** Runs `during` with Mistral listing no name of mistral/large (its dated id and its alias), then lists them again. */
async function withoutLarge(during: () => Promise<void>): Promise<void> {
  const mistral = sim.providers.mistral;
  if (!mistral) throw new Error('no mistral');
  const before = mistral.models();
  mistral.setModels(before.filter((m) => !m.startsWith('mistral-large')));
  try {
    const rebuilt = await gw.admin<{ unlisted: string[] }>('POST', '/registry/rebuild');
    expect(rebuilt.body.unlisted).toEqual([MODEL]);
    await during();
  } finally {
    mistral.setModels(before);
    await gw.admin('POST', '/registry/rebuild');
  }
}

describe('a model whose last offer leaves the registry while its streams run', () => {
  for (const [variant, status] of [
    ['a', 404],
    ['b', 400],
  ] as const) {
    it(`refuses new requests (${status} model_not_found in ${variant.toUpperCase()}), while its key still resumes a stream begun before`, async () => {
      const base = variant === 'a' ? gw.baseA : gw.baseB;
      // Slow enough that the stream is still running when the model leaves.
      sim.providers.mistral?.configure({ chunkGapMs: 40 });
      try {
        const started = await streamRequest(base, key, body);
        expect(started.status).toBe(200);
        const head = await readSse(started, 3);
        const lastSeen = head[2]?.id as string;
        await withoutLarge(async () => {
          const fresh = await streamRequest(base, key, body);
          expect([fresh.status, await code(fresh)]).toEqual([status, 'model_not_found']);
          // The client lost its connection: its resume gets the rest, `:eu` alias or not, counted as any resume.
          const resumed = await streamRequest(base, key, { ...body, model: `${MODEL}:eu` }, { 'Last-Event-ID': lastSeen });
          expect(resumed.status).toBe(200);
          expect(resumed.headers.get('x-ratelimit-remaining')).not.toBeNull();
          const rest = await readSse(resumed);
          expect(rest[0]?.id).toBe(lastSeen.replace(/:3$/, ':4'));
          expect(rest.at(-1)?.data).toBe('[DONE]');
          // Nothing else is resumed under the model's name: another model's id, an unknown stream, a malformed header.
          const other = await streamRequest(base, key, { ...body, model: 'mistral/small' });
          const otherId = (await readSse(other, 1))[0]?.id as string;
          for (const id of [otherId, lastSeen.replace(/req_\w+/, 'req_0123456789abcdef0123456789ab'), 'nope']) {
            const refused = await streamRequest(base, key, body, { 'Last-Event-ID': id });
            expect([id, refused.status, await code(refused)]).toEqual([id, status, 'model_not_found']);
          }
        });
      } finally {
        sim.providers.mistral?.configure({ chunkGapMs: 0 });
      }
      // Back in the list, the model is served again.
      expect((await streamRequest(base, key, body)).status).toBe(200);
    });
  }
});
