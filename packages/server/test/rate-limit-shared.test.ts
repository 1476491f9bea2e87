import type { Simulator } from '@gw/simulator';
import type { PostgresServer, RedisServer } from '@gw/testkit';
import { describe, expect, it } from 'vitest';
import { wav } from './helpers/audio.js';
import type { TestGateway } from './helpers/gateway.js';
import { sharedInstancesPerFile } from './helpers/shared-instances.js';

// One key's window held by three instances sharing Redis, on every route that counts, in both variants.
let redis: RedisServer;
let pg: PostgresServer;
let sim: Simulator;
let gws: TestGateway[];

sharedInstancesPerFile(3, (started) => ({ redis, pg, sim, gws } = started));

const at = (i: number) => gws[i % gws.length] as TestGateway;
const json = (key: string) => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json' });
const post = (url: string, key: string, body: unknown) => fetch(url, { method: 'POST', headers: json(key), body: JSON.stringify(body) });
const chatBody = { model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'x' }], max_tokens: 5 };
const routes: [string, (base: string, key: string) => Promise<Response>][] = [
  ['chat', (b, k) => post(`${b}/chat/completions`, k, chatBody)],
  ['chat streamed', (b, k) => post(`${b}/chat/completions`, k, { ...chatBody, stream: true })],
  ['embeddings', (b, k) => post(`${b}/embeddings`, k, { model: 'baai/bge-m3', input: 'x' })],
  ['rerank', (b, k) => post(`${b}/rerank`, k, { model: 'cohere/rerank-v3.5', query: 'q', documents: ['a', 'b'] })],
  [
    'transcription',
    (b, k) => {
      const form = new FormData();
      form.append('model', 'openai/whisper-large-v3');
      form.append('file', new Blob([new Uint8Array(wav(0.2))], { type: 'audio/wav' }), 'a.wav');
      return fetch(`${b}/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${k}` }, body: form });
    },
  ],
];

interface Answer {
  what: string;
  status: number;
  headers: Headers;
  body: string;
}
const answer = (what: string) => async (res: Response) => ({ what, status: res.status, headers: res.headers, body: await res.text() }) satisfies Answer;

describe('three instances sharing Redis', () => {
  it('admit exactly the limit of one key hit at once on every counted route of both variants; the uncounted ones take nothing', async () => {
    const limit = 40;
    const { key } = await at(0).createKey({ rateLimitRpm: limit });
    const counted: Promise<Answer>[] = [];
    const uncounted: Promise<Answer>[] = [];
    for (let i = 0; i < 130; i++) {
      const gw = at(i);
      const [route, send] = routes[i % routes.length] as (typeof routes)[number];
      const b = Math.floor(i / routes.length) % 2 === 1;
      counted.push(send(b ? gw.baseB : gw.baseA, key).then(answer(`${route} ${b ? 'B' : 'A'}`)));
      const ghost = { ...chatBody, model: 'ghost/model' };
      uncounted.push(
        fetch(`${gw.baseA}/models`, { headers: json(key) }).then(answer('A models')),
        fetch(`${gw.baseB}/models/${encodeURIComponent('mistral/small')}`, { headers: json(key) }).then(answer('B model')),
        post(`${gw.baseA}/chat/completions`, `${key.slice(0, -1)}x`, chatBody).then(answer('401')),
        post(`${gw.baseA}/chat/completions`, key, ghost).then(answer('A model_not_found')),
        post(`${gw.baseB}/chat/completions`, key, ghost).then(answer('B model_not_found')),
      );
    }
    const answers = await Promise.all(counted);
    expect(answers.filter((a) => a.status !== 200 && a.status !== 429).map((a) => [a.what, a.status, a.body])).toEqual([]);
    const admitted = answers.filter((a) => a.status === 200);
    expect(admitted).toHaveLength(limit);
    // Each admitted request was told its own place in the window.
    expect(admitted.map((a) => Number(a.headers.get('x-ratelimit-remaining'))).sort((x, y) => x - y)).toEqual(Array.from({ length: limit }, (_, i) => i));
    for (const a of answers.filter((r) => r.status === 429)) {
      const h = (name: string) => a.headers.get(name);
      expect([a.what, h('x-ratelimit-limit'), h('x-ratelimit-remaining'), h('x-ratelimit-enforced')]).toEqual([a.what, '40', '0', 'true']);
      expect(h('retry-after')).toBe(h('x-ratelimit-reset'));
      expect(Math.ceil(Number(h('retry-after-ms')) / 1000)).toBe(Number(h('retry-after')));
      const b = a.what.endsWith(' B');
      expect([a.what, JSON.parse(a.body)]).toEqual([
        a.what,
        {
          error: {
            message: 'Rate limit exceeded (40 RPM)',
            type: b ? 'rate_limit_error' : 'rate_limit_exceeded',
            code: b ? 'rate_limited' : 'rate_limit_exceeded',
            param: null,
          },
        },
      ]);
    }
    const others = await Promise.all(uncounted);
    expect(new Set(others.map((a) => `${a.what} ${a.status} ${a.headers.get('x-ratelimit-remaining')}`))).toEqual(
      new Set(['A models 200 null', 'B model 200 null', '401 401 null', 'A model_not_found 404 null', 'B model_not_found 400 null']),
    );
  }, 60_000);

  // The one test that waits out a real window (60 s): Retry-After and retry-after-ms say when a request is admitted again.
  it('a request sent just before retry-after-ms is refused on any instance, one just after it is admitted', async () => {
    const { key } = await at(0).createKey({ rateLimitRpm: 5 });
    const chat = async (base: string) => {
      const res = await post(`${base}/chat/completions`, key, chatBody);
      await res.arrayBuffer();
      return res;
    };
    const first = await chat(at(0).baseA);
    expect([first.status, first.headers.get('x-ratelimit-remaining'), first.headers.get('x-ratelimit-reset')]).toEqual([200, '4', '60']);
    await new Promise((r) => setTimeout(r, 1200));
    for (let i = 0; i < 4; i++) {
      const res = await chat(at((i % 2) + 1).baseB);
      // Reset: until the oldest (the first, 1.2 s older) ages out, in whole seconds rounded up.
      expect([res.status, res.headers.get('x-ratelimit-reset')]).toEqual([200, '59']);
    }
    const refused = await chat(at(1).baseA);
    const told = performance.now();
    const waitMs = Number(refused.headers.get('retry-after-ms'));
    expect([refused.status, refused.headers.get('retry-after')]).toEqual([429, String(Math.ceil(waitMs / 1000))]);
    expect(waitMs).toBeGreaterThan(57_000);
    await new Promise((r) => setTimeout(r, waitMs - 150 - (performance.now() - told)));
    const early = await chat(at(2).baseB);
    expect([early.status, early.headers.get('retry-after')]).toEqual([429, '1']);
    await new Promise((r) => setTimeout(r, Math.max(0, waitMs + 5 - (performance.now() - told))));
    const after = await chat(at(0).baseA);
    // The first left the window; the four sent 1.2 s after it are still there.
    expect([after.status, after.headers.get('x-ratelimit-remaining'), after.headers.get('x-ratelimit-enforced')]).toEqual([200, '0', 'true']);
  }, 90_000);
});
