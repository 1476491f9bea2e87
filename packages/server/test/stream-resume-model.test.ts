import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';
import { readSse, streamRequest } from './helpers/sse.js';

// Which model a resume may name: the one its stream was started with, as the registry reads the id (`:eu` or not).
let gw: TestGateway;
let key: string;

beforeAll(async () => {
  gw = await startGateway({
    catalogue: (c) => {
      const small = c.models.find((m) => m.id === 'mistral/small');
      const offer = small?.offers[0];
      if (!small || !offer) throw new Error('no mistral/small in the demo catalogue');
      // A model of its own under the `:eu` id, that no provider lists: never `mistral/small` by another name.
      c.models.push({ ...small, id: 'mistral/small:eu', offers: [{ ...offer, upstreamModel: 'listed-by-no-provider' }] });
      return c;
    },
  });
  key = (await gw.createKey({ rateLimitRpm: 1000 })).key;
}, 60_000);
afterAll(async () => {
  await gw?.close();
});

const ask = (model: string) => ({ model, messages: [{ role: 'user', content: 'one two three four five' }], stream: true, max_tokens: 8 });
const error = async (res: Response) => ((await res.json()) as { error: { code: string; param?: string | null } }).error;

/** A whole stream of `model`; the id of its first event. */
async function streamOf(base: string, model: string): Promise<string> {
  const res = await streamRequest(base, key, ask(model));
  expect(res.status).toBe(200);
  return (await readSse(res))[0]?.id as string;
}

describe('the model a resume names', () => {
  for (const [variant, code] of [
    ['a', 'validation_error'],
    ['b', 'invalid_request'],
  ] as const) {
    it(`is the stream's own, with or without :eu; another model is the client's 400 ${code} (${variant.toUpperCase()})`, async () => {
      const base = variant === 'a' ? gw.baseA : gw.baseB;
      const llama = await streamOf(base, 'meta/llama-3.3-70b');
      for (const model of ['meta/llama-3.3-70b', 'meta/llama-3.3-70b:eu']) {
        const resumed = await streamRequest(base, key, ask(model), { 'Last-Event-ID': llama });
        expect([model, resumed.status]).toEqual([model, 200]);
        expect((await readSse(resumed)).at(-1)?.data).toBe('[DONE]');
      }
      // Started as `:eu`, the stream is the bare model's.
      const aliased = await streamOf(base, 'meta/llama-3.3-70b:eu');
      expect((await streamRequest(base, key, ask('meta/llama-3.3-70b'), { 'Last-Event-ID': aliased })).status).toBe(200);
      // Another model's name does not resume this stream: it would hand one model's answer to a request for another.
      const other = await streamRequest(base, key, ask('mistral/small'), { 'Last-Event-ID': llama });
      expect([other.status, await error(other)]).toMatchObject([400, { code, param: 'model' }]);
    });
  }

  it('a configured model of the `:eu` id is another model: its name does not resume the bare model’s stream', async () => {
    const small = await streamOf(gw.baseA, 'mistral/small');
    // `mistral/small:eu` is served by no provider now: refused as the model it is (404 model_not_found), not resumed.
    const res = await streamRequest(gw.baseA, key, ask('mistral/small:eu'), { 'Last-Event-ID': small });
    expect([res.status, (await error(res)).code]).toEqual([404, 'model_not_found']);
  });

  it('another key’s stream is unknown to it, whatever model it names', async () => {
    const llama = await streamOf(gw.baseA, 'meta/llama-3.3-70b');
    const other = (await gw.createKey({ rateLimitRpm: 1000 })).key;
    for (const model of ['meta/llama-3.3-70b', 'mistral/small']) {
      const res = await streamRequest(gw.baseA, other, ask(model), { 'Last-Event-ID': llama });
      expect([model, res.status, (await error(res)).code]).toEqual([model, 404, 'stream_not_found']);
    }
  });
});
