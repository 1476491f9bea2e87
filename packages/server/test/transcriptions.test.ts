import { mkdirSync, mkdtempSync, readdirSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { gzipSync } from 'node:zlib';
import { type Simulator, startSimulator } from '@gw/simulator';
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { wav, withChunkBeforeFmt } from './helpers/audio.js';
import { eventually, resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';
import { answerBeforeUpload, headBeforeUpload } from './helpers/raw-http.js';
import { openAiClients } from './helpers/sdk.js';

let sim: Simulator;
let gw: TestGateway;
let key: string;
let a: OpenAI;
let b: OpenAI;
const spoolDir = mkdtempSync(join(tmpdir(), 'gw-spool-test-'));

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** An upload folder as a request leaves it while in flight, last touched `ageMs` ago. */
function leftUpload(name: string, ageMs: number): void {
  const dir = join(spoolDir, name);
  mkdirSync(dir);
  writeFileSync(join(dir, 'upload'), 'RIFF');
  const then = new Date(Date.now() - ageMs);
  utimesSync(join(dir, 'upload'), then, then);
  utimesSync(dir, then, then);
}

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  // What an instance killed mid-upload leaves, and what a live one sharing the folder is writing.
  leftUpload('gw-upload-killed', 7 * 3_600_000);
  leftUpload('gw-upload-live', 0);
  leftUpload('not-an-upload', 7 * 3_600_000);
  gw = await startGateway({ sim, env: { GW_UPLOAD_DIR: spoolDir } });
  key = (await gw.createKey({ rateLimitRpm: 10_000 })).key;
  ({ a, b } = openAiClients(gw, key));
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await sim?.close();
  rmSync(spoolDir, { recursive: true, force: true });
});
beforeEach(() => resetProviders(sim));

const audio = () => toFile(wav(3.5), 'meeting.wav', { type: 'audio/wav' });
const spools = () => readdirSync(spoolDir);
type Fields = Record<string, string[]>;
const sentFields = (provider: string) => ((sim.providers[provider]?.stats().last?.body ?? {}) as { fields: Fields }).fields;

describe('upload folders', () => {
  it('removes at start the folders of requests that can no longer be running (an instance killed mid-upload), and only those', async () => {
    await eventually(() => expect(spools().sort()).toEqual(['gw-upload-live', 'not-an-upload']));
    for (const name of spools()) rmSync(join(spoolDir, name), { recursive: true });
  });
});

describe('POST /v1/audio/transcriptions through the official openai SDK', () => {
  it('transcribes a WAV made in the test (json by default), bills its seconds, and removes the spool', async () => {
    const { data, response } = await a.audio.transcriptions.create({ file: await audio(), model: 'openai/whisper-large-v3' }).withResponse();
    expect(data.text).toBe('Simulated transcript of 3.5 seconds of audio.');
    expect(response.headers.get('x-gateway-provider')).toBe('scaleway');
    const upstream = sim.providers.scaleway?.stats().last?.body as { fields: Fields; files: { filename: string; size: number }[] };
    expect(upstream.files[0]).toMatchObject({ filename: 'meeting.wav', size: wav(3.5).length });
    expect(upstream.fields.response_format).toEqual(['verbose_json']);
    await gw.gateway.services.usage.flush();
    const [record] = await gw.gateway.services.store.usage.list({ requestId: response.headers.get('x-request-id') as string });
    expect(record).toMatchObject({ kind: 'audio', model: 'openai/whisper-large-v3', provider: 'scaleway', units: 4, status: 200 });
    expect(record?.cost).toBeCloseTo(4 * 0.00005, 12);
    await eventually(() => expect(spools()).toEqual([]));
  });

  it.each(['openai/whisper-large-v3', 'mistral/voxtral-mini'])('%s answers text, srt and vtt', async (model) => {
    const text = await a.audio.transcriptions.create({ file: await audio(), model, response_format: 'text' });
    expect(text).toBe('Simulated transcript of 3.5 seconds of audio.\n');
    const srt = await a.audio.transcriptions.create({ file: await audio(), model, response_format: 'srt' });
    expect(srt).toMatch(/^1\n00:00:00,000 --> 00:00:03,500\nSimulated transcript of 3\.5 seconds of audio\.\n/);
    const vtt = await b.audio.transcriptions.create({ file: await audio(), model, response_format: 'vtt' });
    expect(vtt).toMatch(/^WEBVTT\n\n00:00:00\.000 --> 00:00:03\.500\nSimulated transcript/);
  });

  it('builds verbose_json for Voxtral, which has none: task, duration, numbered segments and words', async () => {
    const t = await b.audio.transcriptions.create({
      file: await audio(),
      model: 'mistral/voxtral-mini',
      response_format: 'verbose_json',
      timestamp_granularities: ['word', 'segment'],
    });
    expect(t).toMatchObject({ task: 'transcribe', text: 'Simulated transcript of 3.5 seconds of audio.', usage: { type: 'duration', seconds: 4 } });
    expect(t.duration).toBeGreaterThanOrEqual(3.5);
    expect(t.segments?.[0]).toMatchObject({ id: 0, seek: 0, start: 0, end: 3.5, tokens: [], avg_logprob: 0 });
    expect(t.words?.map((w) => w.word)).toEqual(['Simulated', 'transcript', 'of', '3.5', 'seconds', 'of', 'audio.']);
    expect(t.words?.at(-1)?.end).toBe(3.5);
    // Mistral got its own form: no response_format, word timings asked its way.
    const fields = sentFields('mistral');
    expect(fields.response_format).toBeUndefined();
    expect(fields.timestamp_granularities).toEqual(['word']);
  });

  it('relays Whisper’s verbose_json with its segment fields and words on request', async () => {
    const t = await a.audio.transcriptions.create({
      file: await audio(),
      model: 'openai/whisper-large-v3',
      response_format: 'verbose_json',
      timestamp_granularities: ['word'],
      // Sent as the hosts list it, lower case.
      language: 'EN',
      prompt: 'A meeting.',
      temperature: 0.2,
    });
    expect(t.segments?.[0]).toMatchObject({ id: 0, avg_logprob: -0.21, no_speech_prob: 0.01 });
    expect(t.words).toHaveLength(7);
    expect(sentFields('scaleway')).toMatchObject({ language: ['en'], prompt: ['A meeting.'], temperature: ['0.2'], 'timestamp_granularities[]': ['word'] });
  });

  it('fails over between the two transcription providers (Mistral down → Scaleway), the upload sent again from the spool', async () => {
    sim.providers.mistral?.setFault({ kind: 'status', status: 503 });
    const { data, response } = await b.audio.transcriptions
      .create({ file: await audio(), model: 'mistral/voxtral-mini', response_format: 'json' })
      .withResponse();
    expect(data.text).toContain('3.5 seconds');
    expect(response.headers.get('x-gateway-provider')).toBe('scaleway');
    expect(response.headers.get('x-gateway-routing-hops')).toBe('1');
    const size = wav(3.5).length;
    expect((sim.providers.mistral?.stats().last?.body as { files: { size: number }[] } | undefined)?.files[0]?.size).toBe(size);
    expect((sim.providers.scaleway?.stats().last?.body as { files: { size: number }[] } | undefined)?.files[0]?.size).toBe(size);
    await eventually(() => expect(spools()).toEqual([]));
  });

  it('answers 502 when both fail, and still removes the spool', async () => {
    sim.providers.mistral?.setFault({ kind: 'status', status: 500 });
    sim.providers.scaleway?.setFault({ kind: 'status', status: 500 });
    const err = (await a.audio.transcriptions.create({ file: await audio(), model: 'mistral/voxtral-mini' }).catch((e: unknown) => e)) as InstanceType<
      typeof OpenAI.APIError
    >;
    expect([err.status, err.code]).toEqual([502, 'provider_down']);
    await eventually(() => expect(spools()).toEqual([]));
  });

  it('a keyed transcription whose client leaves (the SDK timing out and retrying) runs on, a failover reading its spool: the retry replays it, billed once, no spool left', async () => {
    // Slower than the SDK's timeout: Whisper on Scaleway, and Voxtral on Mistral failing (503) late, then sent to Scaleway.
    const cases = [
      { model: 'openai/whisper-large-v3', calls: { scaleway: 1 }, slow: () => sim.providers.scaleway?.configure({ latencyMs: 900 }) },
      {
        model: 'mistral/voxtral-mini',
        calls: { mistral: 1, scaleway: 1 },
        slow: () => {
          sim.providers.mistral?.configure({ latencyMs: 900 });
          sim.providers.mistral?.setFault({ kind: 'status', status: 503 });
        },
      },
    ];
    const fast = () => {
      for (const p of ['mistral', 'scaleway']) sim.providers[p]?.configure({ latencyMs: 0 });
    };
    try {
      for (const { model, calls, slow } of cases) {
        resetProviders(sim);
        fast();
        slow();
        const own = await gw.createKey({ rateLimitRpm: 1000, budget: 1 });
        const idem = `transcribe-${model}-${Date.now()}`;
        const client = new OpenAI({ apiKey: own.key, baseURL: gw.baseA, maxRetries: 1, timeout: 600, defaultHeaders: { 'X-Idempotency-Key': idem } });
        // Settled either way, so that a retry run again shows as the provider calls it made.
        const answer = await client.audio.transcriptions
          .create({ file: await audio(), model })
          .withResponse()
          .catch((err: Error) => err);
        const made = { mistral: sim.providers.mistral?.stats().byEndpoint.transcriptions, scaleway: sim.providers.scaleway?.stats().byEndpoint.transcriptions };
        expect(made, model).toEqual({ mistral: undefined, scaleway: undefined, ...calls });
        if (answer instanceof Error) throw answer;
        expect([answer.response.headers.get('idempotent-replayed'), answer.data.text], model).toEqual([
          'true',
          'Simulated transcript of 3.5 seconds of audio.',
        ]);
        // The answer came from the whole upload, read again from the spool after the client had left.
        expect((sim.providers.scaleway?.stats().last?.body as { files: { size: number }[] } | undefined)?.files[0]?.size, model).toBe(wav(3.5).length);
        await gw.gateway.services.usage.flush();
        const records = await gw.gateway.services.store.usage.list({ keyId: own.id });
        // Recorded once, as a client that left (it did), at the whole cost.
        expect(
          records.map((r) => [r.status, r.errorCode, r.provider, r.units]),
          model,
        ).toEqual([[499, 'client_closed', 'scaleway', 4]]);
        expect(records[0]?.cost, model).toBeCloseTo(4 * 0.00005, 12);
        const { body: spent } = await gw.admin<{ spent: number }>('GET', `/keys/${own.id}`);
        expect(spent.spent, model).toBeCloseTo(records[0]?.cost ?? -1, 12);
        await eventually(() => expect(spools(), model).toEqual([]));
      }
    } finally {
      fast();
    }
  });
});

// A gateway of its own: the router of the one above has learnt from the faults its tests injected which offer to try first.
describe('a provider refusing a file as too large (413)', () => {
  let fresh: TestGateway;
  let fa: OpenAI;
  let fb: OpenAI;
  beforeAll(async () => {
    fresh = await startGateway({ sim, env: { GW_UPLOAD_DIR: spoolDir } });
    ({ a: fa, b: fb } = openAiClients(fresh, (await fresh.createKey({ rateLimitRpm: 10_000 })).key));
  }, 60_000);
  afterAll(async () => {
    await fresh?.close();
  });

  it('fails over on a provider’s 413 (the file over that host’s size limit), billing only the offer that answered; the last 413 is the client’s 400', async () => {
    sim.providers.mistral?.setFault({ kind: 'status', status: 413, message: 'File too large: the limit is 20 MB' });
    // Mistral first: the cheaper offer, named first for a router that knows nothing of either yet.
    const mistralFirst = { headers: { 'x-gateway-provider-prefer': 'mistral' } };
    const { data, response } = await fb.audio.transcriptions
      .create({ file: await audio(), model: 'mistral/voxtral-mini', response_format: 'json' }, mistralFirst)
      .withResponse();
    expect(data.text).toContain('3.5 seconds');
    expect([response.headers.get('x-gateway-provider'), response.headers.get('x-gateway-routing-hops')]).toEqual(['scaleway', '1']);
    expect([sim.providers.mistral?.stats().total, sim.providers.scaleway?.stats().total]).toEqual([1, 1]);
    await fresh.gateway.services.usage.flush();
    const records = await fresh.gateway.services.store.usage.list({ requestId: response.headers.get('x-request-id') as string });
    expect(records.map((r) => [r.provider, r.status, r.units])).toEqual([['scaleway', 200, 4]]);
    expect(records[0]?.cost).toBeCloseTo(4 * 0.00005, 12);
    // Every host refuses it: the request's own fault, told in the provider's words, not a 502 to retry.
    sim.providers.scaleway?.setFault({ kind: 'status', status: 413, message: 'File too large: the limit is 25 MB' });
    for (const client of [fa, fb]) {
      const err = (await client.audio.transcriptions
        .create({ file: await audio(), model: 'mistral/voxtral-mini' }, mistralFirst)
        .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
      expect([err.status, err.message]).toEqual([400, expect.stringContaining('answered 413')]);
    }
    expect([sim.providers.mistral?.stats().total, sim.providers.scaleway?.stats().total]).toEqual([3, 3]);
    // A 400 (the file itself is bad) still ends the request at the first offer.
    resetProviders(sim);
    sim.providers.mistral?.setFault({ kind: 'status', status: 400, message: 'Audio file might be corrupted or unsupported' });
    const bad = (await fa.audio.transcriptions
      .create({ file: await audio(), model: 'mistral/voxtral-mini' }, mistralFirst)
      .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
    expect([bad.status, sim.providers.scaleway?.stats().total]).toEqual([400, 0]);
    await eventually(() => expect(spools()).toEqual([]));
  });
});

describe('the upload limit (GW_UPLOAD_LIMIT_BYTES, 25 MiB by default)', () => {
  const THIRTY_MB = 30 * 1024 * 1024;

  /**
   * Sustained peak growth of this process's live heap and buffers while
   * `work` runs: sampled every 100 ms right after a full GC, so garbage
   * (socket chunks already written to the spool) does not count. V8 frees
   * dead buffers' memory concurrently (on a busy machine 200 ms later), so
   * one or two samples can still count some; what is really held stays for
   * the whole upload, so a peak counts only when three samples in a row
   * hold it. (Not more often: back-to-back full GCs starve the upload.)
   */
  async function peakGrowth(work: () => Promise<void>): Promise<number> {
    const live = () => {
      gc();
      const m = process.memoryUsage();
      return m.heapUsed + m.arrayBuffers;
    };
    // The baseline settles first: buffers of earlier tests that are already dead can take a few hundred ms to be freed,
    // and counting them in the baseline hid part of what `work` holds.
    let base = live();
    for (let i = 0; i < 5; i++) {
      await new Promise((r) => setTimeout(r, 100));
      base = Math.min(base, live());
    }
    const samples = [base];
    const timer = setInterval(() => samples.push(live()), 100);
    try {
      await work();
    } finally {
      clearInterval(timer);
    }
    samples.push(live());
    let peak = base;
    for (let i = 2; i < samples.length; i++) peak = Math.max(peak, Math.min(samples[i - 2] as number, samples[i - 1] as number, samples[i] as number));
    return peak - base;
  }

  /**
   * Streams a multipart upload of `bytes` from one reused 64 KiB block (so
   * the client itself holds no copy), with or without Content-Length, and
   * reads the gateway's early answer (node:http reads it while still sending).
   */
  async function streamedUpload(bytes: number, withLength: boolean): Promise<{ status: number; body: string }> {
    const boundary = 'gwtestboundary';
    const head = Buffer.from(
      `--${boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nopenai/whisper-large-v3\r\n` +
        `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.wav"\r\nContent-Type: audio/wav\r\n\r\n`,
    );
    const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
    const block = Buffer.alloc(64 * 1024, 1);
    async function* parts() {
      yield head;
      for (let sent = 0; sent < bytes; sent += block.length) yield block;
      yield tail;
    }
    const headers: Record<string, string> = { authorization: `Bearer ${key}`, 'content-type': `multipart/form-data; boundary=${boundary}` };
    if (withLength) headers['content-length'] = String(head.length + Math.ceil(bytes / block.length) * block.length + tail.length);
    // node:http, writing only when the socket drains, so the client holds no backlog of its own.
    return new Promise((resolve, reject) => {
      const req = httpRequest(`${gw.baseA}/audio/transcriptions`, { method: 'POST', headers });
      let answered = false;
      req.on('response', (res) => {
        answered = true;
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
      });
      req.on('error', (err) => {
        if (!answered) reject(err);
      });
      void (async () => {
        for await (const part of parts()) {
          if (answered || req.destroyed) return;
          if (!req.write(part))
            await new Promise((r) => {
              req.once('drain', r);
              req.once('close', r);
            });
        }
        req.end();
      })();
    });
  }

  it('the memory measure sees 30 MB held for 1.5 s (so "flat" below can fail)', async () => {
    const growth = await peakGrowth(async () => {
      const held = Buffer.alloc(THIRTY_MB, 1);
      await new Promise((r) => setTimeout(r, 1500));
      expect(held[THIRTY_MB - 1]).toBe(1);
    });
    expect(growth).toBeGreaterThan(25 * 1024 * 1024);
  });

  it('refuses a 30 MB upload through the SDK with 413 payload_too_large (from its Content-Length, before reading it)', async () => {
    const big = await toFile(Buffer.alloc(THIRTY_MB, 7), 'long.wav', { type: 'audio/wav' });
    const err = (await a.audio.transcriptions.create({ file: big, model: 'openai/whisper-large-v3' }).catch((e: unknown) => e)) as InstanceType<
      typeof OpenAI.APIError
    >;
    expect([err.status, err.code]).toEqual([413, 'payload_too_large']);
    expect(sim.providers.scaleway?.stats().total).toBe(0);
    expect(spools()).toEqual([]);
  }, 30_000);

  it.each([
    ['with Content-Length', true],
    ['chunked, refused once the spool passes the limit', false],
  ])(
    'refuses a streamed 30 MB upload (%s): memory stays flat, the spool is removed',
    async (_how, withLength) => {
      let res: { status: number; body: string } | undefined;
      const growth = await peakGrowth(async () => {
        res = await streamedUpload(THIRTY_MB, withLength);
      });
      expect(res?.status).toBe(413);
      expect((JSON.parse(res?.body ?? '{}') as { error: { code: string } }).error.code).toBe('payload_too_large');
      // Flat: a fraction of the upload (holding what passed the 25 MiB limit would show at least that).
      expect(growth).toBeLessThan(12 * 1024 * 1024);
      expect(sim.providers.scaleway?.stats().total).toBe(0);
      await eventually(() => expect(spools()).toEqual([]));
    },
    60_000,
  );

  it('removes the spool of an upload the client abandons half-way', async () => {
    await new Promise<void>((resolve) => {
      const req = httpRequest(`${gw.baseA}/audio/transcriptions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'multipart/form-data; boundary=zz', 'content-length': String(5_000_000) },
      });
      req.on('error', () => resolve());
      req.write('--zz\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n');
      req.write(Buffer.alloc(1_000_000));
      setTimeout(() => {
        expect(spools()).toHaveLength(1);
        req.destroy();
        resolve();
      }, 200);
    });
    await eventually(() => expect(spools()).toEqual([]));
  });
});

describe('the form, validated', () => {
  async function send(form: FormData) {
    const res = await fetch(`${gw.baseA}/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: form });
    return { status: res.status, error: ((await res.json()) as { error: { code: string; param: string | null; message: string } }).error };
  }
  const form = (fields: Record<string, string>, withFile = true) => {
    const f = new FormData();
    for (const [k, v] of Object.entries(fields)) f.append(k, v);
    if (withFile) f.append('file', new Blob([new Uint8Array(wav(1))], { type: 'audio/wav' }), 'a.wav');
    return f;
  };

  it('names the field: missing file, bad response_format, temperature, granularities without verbose_json, unknown fields, non-audio model', async () => {
    const model = 'openai/whisper-large-v3';
    for (const [fields, withFile, param] of [
      [{ model }, false, 'file'],
      [{ model, response_format: 'mp3' }, true, 'response_format'],
      [{ model, temperature: 'warm' }, true, 'temperature'],
      [{ model, 'timestamp_granularities[]': 'word' }, true, 'timestamp_granularities'],
      [{ model, chunking_strategy: 'auto' }, true, 'chunking_strategy'],
      // A field like any other, not one "sent more than once" because every object has one.
      [{ model, constructor: 'x' }, true, 'constructor'],
      [{ model, toString: 'x' }, true, 'toString'],
      [{ model: 'mistral/small' }, true, 'model'],
      [{}, true, 'model'],
    ] as const) {
      const res = await send(form(fields, withFile));
      expect(res.status, JSON.stringify(fields)).toBe(400);
      expect(res.error.param, JSON.stringify(fields)).toBe(param);
    }
    // A language's name is told what code is expected, never the expression that checks it.
    const language = await send(form({ model, language: 'french' }));
    expect([language.status, language.error.param, language.error.message]).toEqual([
      400,
      'language',
      "Invalid body: 'language' must be the language's ISO-639-1 code, such as 'fr' or 'en'.",
    ]);
    const empty = new FormData();
    empty.append('model', model);
    empty.append('file', new Blob([], { type: 'audio/wav' }), 'empty.wav');
    const refused = await send(empty);
    expect([refused.status, refused.error.param, refused.error.message]).toEqual([400, 'file', "Invalid body: 'file' is empty."]);
    const unknown = await send(form({ model: 'ghost/whisper' }));
    expect([unknown.status, unknown.error.code]).toEqual([404, 'model_not_found']);
    // Two values for one field: which to use is not guessed.
    const twice = new FormData();
    twice.append('model', model);
    twice.append('model', 'mistral/voxtral-mini');
    twice.append('file', new Blob([wav(1)], { type: 'audio/wav' }), 'a.wav');
    const repeated = await send(twice);
    expect([repeated.status, repeated.error.param]).toEqual([400, 'model']);
    // A compressed form is the wrong encoding (415, as for a JSON body), not a malformed form.
    const packed = await fetch(`${gw.baseA}/audio/transcriptions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'multipart/form-data; boundary=b', 'content-encoding': 'gzip' },
      body: gzipSync(Buffer.from('--b\r\nContent-Disposition: form-data; name="model"\r\n\r\nopenai/whisper-large-v3\r\n--b--\r\n')),
    });
    expect([packed.status, ((await packed.json()) as { error: { code: string } }).error.code]).toEqual([415, 'unsupported_media_type']);
    await eventually(() => expect(spools()).toEqual([]));
  });

  it('a file sent as a text field (curl -F file=<a.wav, requests data=) is told to send it as a file part, short or long, in each variant', async () => {
    for (const seconds of [0.5, 3]) {
      for (const base of [gw.baseA, gw.baseB]) {
        const f = new FormData();
        f.append('model', 'openai/whisper-large-v3');
        // A string part: no filename and no content type, as curl's `<` and a form's `data=` send it.
        f.append('file', wav(seconds).toString('latin1'));
        const res = await fetch(`${base}/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: f });
        const { error } = (await res.json()) as { error: { param: string; message: string } };
        expect([res.status, error.param, error.message], `${base} ${seconds}s`).toEqual([400, 'file', expect.stringContaining('curl -F file=@audio.wav')]);
      }
    }
    await eventually(() => expect(spools()).toEqual([]));
  });

  it("OpenAI's fields the gateway does not offer are refused saying so, in each variant, not as fields it does not know", async () => {
    const own = await gw.createKey({ rateLimitRpm: 10_000 });
    const clients = openAiClients(gw, own.key);
    const model = 'openai/whisper-large-v3';
    for (const [client, code] of [
      [clients.a, 'validation_error'],
      [clients.b, 'invalid_request'],
    ] as const) {
      for (const [extra, param, said] of [
        [{ include: ['logprobs'] }, 'include', 'is not offered: the providers behind this gateway give no logprobs of a transcript.'],
        [{ chunking_strategy: 'auto' }, 'chunking_strategy', 'is not offered: the audio is sent to the provider whole'],
        [{ chunking_strategy: { type: 'server_vad' } }, 'chunking_strategy', 'is not offered: the audio is sent to the provider whole'],
        [{ known_speaker_names: ['agent'] }, 'known_speaker_names', 'is not offered: transcripts here do not tell speakers apart'],
        [{ stream: true }, 'stream', 'is not offered: a transcription is answered whole'],
      ] as const) {
        const file = await toFile(wav(1), 'a.wav', { type: 'audio/wav' });
        const err = await client.audio.transcriptions.create({ file, model, ...extra } as OpenAI.Audio.TranscriptionCreateParams).catch((e: unknown) => e);
        expect(err, JSON.stringify(extra)).toBeInstanceOf(OpenAI.BadRequestError);
        const refused = err as InstanceType<typeof OpenAI.BadRequestError>;
        expect([refused.code, refused.param, refused.message]).toEqual([code, param, expect.stringContaining(`'${param}' ${said}`)]);
      }
    }
    await eventually(() => expect(spools()).toEqual([]));
  });

  it('refuses bytes that are no audio (whatever their name) with 400 naming file, before any provider, unrecorded', async () => {
    const own = await gw.createKey({ rateLimitRpm: 10_000 });
    const clients = openAiClients(gw, own.key);
    const notAudio = Buffer.alloc(20_000, 7);
    // A phone's photo (HEIC, AVIF) opens with an ISO media `ftyp` box as MP4 audio does: its brand says it is a picture.
    const photo = (brand: string) => Buffer.concat([Buffer.from([0, 0, 0, 24]), Buffer.from(`ftyp${brand}`, 'latin1'), Buffer.alloc(20_000)]);
    for (const [client, code] of [
      [clients.a, 'validation_error'],
      [clients.b, 'invalid_request'],
    ] as const) {
      for (const model of ['openai/whisper-large-v3', 'mistral/voxtral-mini']) {
        for (const [name, bytes] of [
          ...['a.png', 'a.txt', 'a.bin', 'noext', 'a.wav', undefined].map((n) => [n, notAudio] as const),
          ['IMG_0001.HEIC', photo('heic')],
          ['cover.avif', photo('avif')],
        ] as const) {
          const file = await toFile(bytes, name);
          const err = (await client.audio.transcriptions.create({ file, model }).catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
          expect([err.status, err.code, err.param], `${model} ${name}`).toEqual([400, code, 'file']);
          expect(err.message).toContain('Supported formats: flac, m4a, mp3, mp4, mpeg, mpga, oga, ogg, wav, webm');
        }
      }
    }
    expect(sim.providers.scaleway?.stats().total).toBe(0);
    expect(sim.providers.mistral?.stats().total).toBe(0);
    // A refusal for the body, as an empty file's: no usage record, nothing billed.
    await gw.gateway.services.usage.flush();
    expect(await gw.gateway.services.store.usage.list({ keyId: own.id })).toEqual([]);
    await eventually(() => expect(spools()).toEqual([]));
  });

  it('transcribes audio sent with no extension, or as a file part with a content type and no name, under a name with its format', async () => {
    const sent = () => (sim.providers.scaleway?.stats().last?.body as { files: { filename: string }[] } | undefined)?.files[0]?.filename;
    // The SDK names bytes given without a name `unknown_file`.
    const bare = await a.audio.transcriptions.create({ file: await toFile(wav(1)), model: 'openai/whisper-large-v3' });
    expect(bare.text).toContain('1.0 seconds');
    expect(sent()).toBe('unknown_file.wav');
    const mp3 = Buffer.concat([Buffer.from([0xff, 0xfb, 0x90, 0x64]), Buffer.alloc(31_996)]);
    await a.audio.transcriptions.create({ file: await toFile(mp3, 'voice.bin'), model: 'openai/whisper-large-v3' });
    expect(sent()).toBe('voice.bin.mp3');
    // An M4A voice memo's brand is audio: it passes where a photo's does not.
    const m4a = Buffer.concat([Buffer.from([0, 0, 0, 24]), Buffer.from('ftypM4A ', 'latin1'), Buffer.alloc(31_988)]);
    await a.audio.transcriptions.create({ file: await toFile(m4a, 'memo'), model: 'openai/whisper-large-v3' });
    expect(sent()).toBe('memo.mp4');
    // httpx's `files={'file': (None, data, 'audio/wav')}`: a part with a content type and no filename.
    const boundary = 'nameless';
    const body = Buffer.concat([
      Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nopenai/whisper-large-v3\r\n`),
      Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"\r\nContent-Type: audio/wav\r\n\r\n`),
      wav(2),
      Buffer.from(`\r\n--${boundary}--\r\n`),
    ]);
    const res = await fetch(`${gw.baseA}/audio/transcriptions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': `multipart/form-data; boundary=${boundary}` },
      body,
    });
    expect([res.status, ((await res.json()) as { text: string }).text]).toEqual([200, 'Simulated transcript of 2.0 seconds of audio.']);
    expect(sent()).toBe('upload.wav');
  });

  it("sends the provider the file's own name: no folders of the client, no control characters, not kilobytes long", async () => {
    const sent = () => (sim.providers.scaleway?.stats().last?.body as { files: { filename: string }[] } | undefined)?.files[0]?.filename;
    const boundary = 'named';
    const upload = (filename: string) =>
      fetch(`${gw.baseA}/audio/transcriptions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': `multipart/form-data; boundary=${boundary}` },
        body: Buffer.concat([
          Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nopenai/whisper-large-v3\r\n`),
          Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${filename}"\r\nContent-Type: audio/wav\r\n\r\n`),
          wav(1),
          Buffer.from(`\r\n--${boundary}--\r\n`),
        ]),
      });
    for (const [filename, forwarded] of [
      ['meeting.wav', 'meeting.wav'],
      ['../../etc/passwd.mp3', 'passwd.mp3'],
      ['C:\\Users\\anna\\Klient Müller\\call.wav', 'call.wav'],
      ['/home/anna/private/', 'upload.wav'],
      ['..', 'upload.wav'],
      // A name that is only an extension: the stem a nameless file gets, not the extension twice (`.wav.wav`).
      ['.wav', 'upload.wav'],
      ['C:\\rec\\.MP3', 'upload.MP3'],
      ['take\u00001.wav', 'take1.wav'],
      [`${'a'.repeat(3000)}.wav`, `${'a'.repeat(124)}.wav`],
      ['réunion 日本.wav', 'réunion 日本.wav'],
    ]) {
      const res = await upload(filename);
      expect(res.status, filename).toBe(200);
      await res.arrayBuffer();
      expect(sent(), filename).toBe(forwarded);
    }
    await eventually(() => expect(spools()).toEqual([]));
  });

  it('refuses a part header over 16 KB however the body is cut on its way', async () => {
    const boundary = 'longhead';
    const body = Buffer.concat([
      Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nopenai/whisper-large-v3\r\n`),
      Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${'a'.repeat(20_000)}.wav"\r\nContent-Type: audio/wav\r\n\r\n`),
      wav(1),
      Buffer.from(`\r\n--${boundary}--\r\n`),
    ]);
    for (const piece of [body.length, 1000]) {
      const answer = await new Promise<{ status: number; message: string }>((resolve, reject) => {
        const req = httpRequest(
          `${gw.baseA}/audio/transcriptions`,
          {
            method: 'POST',
            headers: { authorization: `Bearer ${key}`, 'content-type': `multipart/form-data; boundary=${boundary}`, 'content-length': body.length },
          },
          (res) => {
            let text = '';
            res.on('data', (d: Buffer) => {
              text += d;
            });
            res.on('end', () => resolve({ status: res.statusCode ?? 0, message: (JSON.parse(text) as { error?: { message: string } }).error?.message ?? '' }));
          },
        );
        req.on('error', reject);
        for (let at = 0; at < body.length; at += piece) req.write(body.subarray(at, at + piece));
        req.end();
      });
      expect(answer, `in pieces of ${piece}`).toEqual({ status: 400, message: 'The multipart/form-data body is malformed: a part header is too long.' });
    }
    expect(sim.providers.scaleway?.stats().total).toBe(0);
    await eventually(() => expect(spools()).toEqual([]));
  });

  it('a POST with no body at all is told to send a multipart form, in each variant (not a JSON object, which is refused next)', async () => {
    for (const [base, code] of [
      [gw.baseA, 'validation_error'],
      [gw.baseB, 'invalid_request'],
    ] as const) {
      const res = await fetch(`${base}/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${key}` } });
      const { error } = (await res.json()) as { error: { code: string; message: string } };
      expect([res.status, error.code, error.message]).toEqual([
        400,
        code,
        "The request body is empty; send multipart/form-data with the audio as the file part 'file' and the 'model'.",
      ]);
    }
    expect(sim.providers.scaleway?.stats().total).toBe(0);
  });

  it('refuses a malformed multipart body with 400', async () => {
    const res = await fetch(`${gw.baseA}/audio/transcriptions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'multipart/form-data; boundary=abc' },
      body: '--abc\r\nContent-Disposition: form-data; name="model"\r\n\r\nopenai/whisper-large-v3\r\n--abc\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\nRIFF',
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { message: string } }).error.message).toContain('closing boundary');
    await eventually(() => expect(spools()).toEqual([]));
  });
  it("takes a boundary of RFC 2046's 70 characters, quoted or not, and refuses a longer one with the form's 415", async () => {
    const upload = (boundary: string, declared: string, base = gw.baseA) =>
      fetch(`${base}/audio/transcriptions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': `multipart/form-data; boundary=${declared}` },
        body: Buffer.concat([
          Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nopenai/whisper-large-v3\r\n`),
          Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\n`),
          wav(2),
          Buffer.from(`\r\n--${boundary}--\r\n`),
        ]),
      });
    const longest = `----${'x'.repeat(56)}0123456789`;
    expect(longest).toHaveLength(70);
    const spaced = `'()+_,-./:=? ${'y'.repeat(57)}`;
    expect(spaced).toHaveLength(70);
    for (const [boundary, declared] of [
      [longest, longest],
      [longest, `"${longest}"`],
      [longest, `${longest}; charset=utf-8`],
      [spaced, `"${spaced}"`],
      // Outside RFC 2046's set, yet matched exactly: read.
      ['fo@o{1}', 'fo@o{1}'],
    ]) {
      const res = await upload(boundary, declared);
      expect([declared, res.status, ((await res.json()) as { text: string }).text]).toEqual([declared, 200, 'Simulated transcript of 2.0 seconds of audio.']);
    }
    // Past 70 characters, or a space unquoted or last: no boundary at all, said up front.
    for (const [base, code] of [
      [gw.baseA, 'unsupported_media_type'],
      [gw.baseB, 'unsupported_media_type'],
    ] as const) {
      for (const boundary of [`${longest}a`, `"${longest}a"`, `"${'z'.repeat(69)} "`, 'a b', 'abc"']) {
        const res = await upload(boundary.replaceAll('"', ''), boundary, base);
        const { error } = (await res.json()) as { error: { code: string; message: string } };
        expect([boundary, res.status, error.code]).toEqual([boundary, 415, code]);
        expect(error.message).toContain('send multipart/form-data with its boundary (multipart/form-data; boundary=...)');
      }
    }
    expect(sim.providers.scaleway?.stats().total).toBe(5);
    await eventually(() => expect(spools()).toEqual([]));
  });

  it('refuses an upload of a key or workspace whose budget is used up before reading it (402, the spool not filled)', async () => {
    const { port } = new URL(gw.baseA);
    const firstLine = async (apiKey: string, base = '/v1') =>
      (await headBeforeUpload(Number(port), `${base}/audio/transcriptions`, apiKey)).split('\r\n')[0] ?? '';
    const before = spools().length;
    // A budget of 0, the key's own or its workspace's.
    const zero = await gw.createKey({ rateLimitRpm: 1000, budget: 0 });
    expect(await firstLine(zero.key)).toMatch(/^HTTP\/1\.1 402 /);
    expect(await firstLine(zero.key, '/alt/v1')).toMatch(/^HTTP\/1\.1 402 /);
    const ws = await gw.admin<{ id: string }>('POST', '/workspaces', { name: 'spent-out', budget: 0 });
    const inWs = await gw.createKey({ rateLimitRpm: 1000, workspaceId: ws.body.id });
    expect(await firstLine(inWs.key)).toMatch(/^HTTP\/1\.1 402 /);
    // A budget spent: lowered under what the key has spent.
    const spender = await gw.createKey({ rateLimitRpm: 1000, budget: 1 });
    const client = new OpenAI({ apiKey: spender.key, baseURL: gw.baseA, maxRetries: 0 });
    await client.chat.completions.create({ model: 'mistral/small', messages: [{ role: 'user', content: 'hello there' }] });
    await gw.gateway.services.usage.flush();
    const spent = (await gw.admin<{ spent: number }>('GET', `/keys/${spender.id}`)).body.spent;
    expect(spent).toBeGreaterThan(0);
    await gw.admin('PATCH', `/keys/${spender.id}`, { budget: spent / 2 });
    expect(await firstLine(spender.key)).toMatch(/^HTTP\/1\.1 402 /);
    // With budget left, the upload is read and transcribed as before.
    await gw.admin('PATCH', `/keys/${spender.id}`, { budget: 1 });
    const file = await toFile(wav(1), 'a.wav', { type: 'audio/wav' });
    const text = await client.audio.transcriptions.create({ model: 'openai/whisper-large-v3', file, response_format: 'text' });
    expect(String(text).length).toBeGreaterThan(0);
    await eventually(() => expect(spools().length).toBe(before));
  });

  it('holds a WAV whose fmt chunk follows another (Core Audio writes a JUNK chunk first, a field recorder kilobytes of iXML) at its own byte rate, not at the lowest speech rate', async () => {
    // €0.005 left: 4 s of Whisper (€0.0002) fits; the 225 s or more the file's 112 KB hold at 500 bytes a second (€0.01125) does not.
    for (const [id, size] of [
      ['JUNK', 28],
      ['iXML', 8192],
    ] as const) {
      const own = await gw.createKey({ rateLimitRpm: 1000, budget: 0.005 });
      const client = new OpenAI({ apiKey: own.key, baseURL: gw.baseA, maxRetries: 0 });
      const file = await toFile(withChunkBeforeFmt(wav(3.5), id, size), 'memo.wav', { type: 'audio/wav' });
      const { data, response } = await client.audio.transcriptions.create({ model: 'openai/whisper-large-v3', file }).withResponse();
      expect(data.text, id).toBe('Simulated transcript of 3.5 seconds of audio.');
      await gw.gateway.services.usage.flush();
      const [record] = await gw.gateway.services.store.usage.list({ requestId: response.headers.get('x-request-id') as string });
      expect(record, id).toMatchObject({ units: 4, status: 200 });
    }
    await eventually(() => expect(spools()).toEqual([]));
  });

  it('refuses a model named before the file that the key may not use as soon as it is read, the upload not read (the variant’s envelope)', async () => {
    const { port } = new URL(gw.baseA);
    const ws = await gw.admin<{ id: string }>('POST', '/workspaces', { name: 'no-audio', enabledModels: ['mistral/small'] });
    const inWs = await gw.createKey({ rateLimitRpm: 1000, workspaceId: ws.body.id });
    // openai-python and `curl -F model=… -F file=@…` send the text fields first, then the file part.
    const modelFirst = (model: string) =>
      `--b\r\nContent-Disposition: form-data; name="model"\r\n\r\n${model}\r\n` +
      `--b\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\nRIFF`;
    const refused = async (base: string, apiKey: string, model: string) => {
      const answer = await answerBeforeUpload(Number(port), `${base}/audio/transcriptions`, apiKey, modelFirst(model));
      const [head = '', body = ''] = answer.split('\r\n\r\n');
      return {
        status: Number(head.split(' ')[1]),
        close: /\r\nconnection: close\r\n/i.test(head),
        error: (JSON.parse(body) as { error: Record<string, unknown> }).error,
      };
    };
    expect(await refused('/v1', key, 'openai/whisper-9')).toMatchObject({ status: 404, close: true, error: { code: 'model_not_found', param: 'model' } });
    expect(await refused('/alt/v1', key, 'openai/whisper-9')).toMatchObject({ status: 400, close: true, error: { code: 'model_not_found' } });
    const notEnabled = await refused('/v1', inWs.key, 'openai/whisper-large-v3');
    expect(notEnabled).toMatchObject({
      status: 404,
      error: { code: 'model_not_found', message: "The model 'openai/whisper-large-v3' is not enabled for this workspace." },
    });
    expect(await refused('/alt/v1', inWs.key, 'openai/whisper-large-v3')).toMatchObject({ status: 400, error: { code: 'model_not_found' } });
    expect([sim.providers.scaleway?.stats().total, sim.providers.mistral?.stats().total]).toEqual([0, 0]);
    await eventually(() => expect(spools()).toEqual([]));
    // A model the key may use goes on to read the file, in that order too.
    const file = await toFile(wav(1), 'a.wav', { type: 'audio/wav' });
    const text = await a.audio.transcriptions.create({ model: 'openai/whisper-large-v3', file, response_format: 'text' });
    expect(String(text)).toContain('1.0 seconds');
  });
});
