import { type Simulator, startSimulator } from '@gw/simulator';
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { flac, id3Tagged, m4a, m4aFragmented, mp3, mp3AfterGap, mp3Vbr, oggOpus, rf64, wav, webm, zeroPadded } from './helpers/audio.js';
import { resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';

let sim: Simulator;
let gw: TestGateway;
let key: { id: string; key: string };

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  gw = await startGateway({ sim });
  key = await gw.createKey({ rateLimitRpm: 10_000 });
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await sim?.close();
});
beforeEach(() => resetProviders(sim));

// Each as a real client sends it; a compressed file is timed by its container, not its size as if it were PCM.
const uploads: [string, () => Buffer][] = [
  ['talk.mp3', () => mp3(12)],
  ['tagged.mp3', () => mp3(12, { id3: true })],
  // Read on past the gap as a decoder resyncs, not as 12 s of PCM.
  ['retagged.mp3', () => mp3AfterGap(12, 300)],
  ['vbr.mp3', () => mp3Vbr(12)],
  ['notes.flac', () => flac(12)],
  ['voice.ogg', () => oggOpus(12)],
  ['memo.m4a', () => m4a(12)],
  ['safari.m4a', () => m4aFragmented(12)],
  ['blob.webm', () => webm(12)],
  // Zero bytes before the first frame or the tag, as some recorders pad: past the first 4 KB read, too.
  ['padded.mp3', () => zeroPadded(mp3(12), 1000)],
  ['padded', () => zeroPadded(mp3(12, { id3: true }), 10_000)],
  // A field recorder's 64-bit WAV, and FLAC after an ID3 tag, neither named for what they are.
  ['field', () => rf64(wav(12))],
  ['take.bin', () => id3Tagged(flac(12))],
];

describe('compressed uploads are timed and billed by their audio, through the official openai SDK', () => {
  for (const [name, make] of uploads) {
    it(`${name}: 12 s of audio is 12 s in the transcript, the answer's usage and the usage record, on both providers`, async () => {
      for (const model of ['openai/whisper-large-v3', 'mistral/voxtral-mini']) {
        const client = new OpenAI({ apiKey: key.key, baseURL: gw.baseA, maxRetries: 0 });
        const { data, response } = await client.audio.transcriptions
          .create({ file: await toFile(make(), name), model, response_format: 'verbose_json' }, { headers: { 'x-gateway-provider-prefer': 'mistral' } })
          .withResponse();
        expect(data.duration, `${name} ${model}`).toBeGreaterThan(11.9);
        expect(data.duration, `${name} ${model}`).toBeLessThan(12.2);
        await gw.gateway.services.usage.flush();
        const records = await gw.gateway.services.store.usage.list({ requestId: response.headers.get('x-request-id') as string });
        expect(
          records.map((r) => r.units),
          `${name} ${model}`,
        ).toEqual([12]);
      }
    });
  }
});

describe('a quiet recording, or one coded below the lowest speech rate, holds more seconds than its bytes say', () => {
  // 10 minutes in 37 to 75 KB (Opus at 0.5 kbit/s, AAC and FLAC of silence write less): 75 to 150 s at 4 kbit/s.
  const quiet: [string, () => Buffer][] = [
    ['quiet.ogg', () => oggOpus(600, 0.5)],
    ['quiet.m4a', () => m4a(600, 0.5)],
    ['quiet.flac', () => flac(600, 1)],
  ];

  it('is billed its whole length as the provider counts it, not cut at what its bytes hold at 4 kbit/s', async () => {
    for (const [name, make] of quiet) {
      for (const model of ['openai/whisper-large-v3', 'mistral/voxtral-mini']) {
        const client = new OpenAI({ apiKey: key.key, baseURL: gw.baseA, maxRetries: 0 });
        const { data, response } = await client.audio.transcriptions
          .create({ file: await toFile(make(), name), model, response_format: 'verbose_json' }, { headers: { 'x-gateway-provider-prefer': 'mistral' } })
          .withResponse();
        expect(data.usage, `${name} ${model}`).toEqual({ type: 'duration', seconds: 600 });
        await gw.gateway.services.usage.flush();
        const records = await gw.gateway.services.store.usage.list({ requestId: response.headers.get('x-request-id') as string });
        expect(
          records.map((r) => r.units),
          `${name} ${model}`,
        ).toEqual([600]);
      }
    }
  });

  it('holds the length its container tells, at its start or its end: a budget of 300 s refuses 600 s in 37 to 75 KB (402) rather than overrun it', async () => {
    // 300 s at Whisper's 0.00005 a second; the bytes alone held 75 to 150 s, under it, and the key spent 600 s.
    const budgeted = await gw.createKey({ rateLimitRpm: 1000, budget: 0.015 });
    const client = new OpenAI({ apiKey: budgeted.key, baseURL: gw.baseA, maxRetries: 0 });
    for (const [name, make] of quiet) {
      const err = await client.audio.transcriptions.create({ file: await toFile(make(), name), model: 'openai/whisper-large-v3' }).catch((e: unknown) => e);
      expect(err, name).toBeInstanceOf(OpenAI.APIError);
      expect((err as InstanceType<typeof OpenAI.APIError>).status, name).toBe(402);
    }
    expect(sim.providers.scaleway?.stats().byEndpoint['transcriptions'] ?? 0).toBe(0);
    // 200 s of it fits.
    const answer = await client.audio.transcriptions.create({ file: await toFile(oggOpus(200, 0.5), 'quiet.ogg'), model: 'openai/whisper-large-v3' });
    expect(answer.text).toContain('200.0 seconds');
  });
});

describe("a container's stated length that its bytes cannot hold is a header that lies", () => {
  it('a WebM stating an infinite or absurd Duration is billed a finite length its bytes bound, and holds no budget for good', async () => {
    const budgeted = await gw.createKey({ rateLimitRpm: 1000, budget: 5 });
    const client = new OpenAI({ apiKey: budgeted.key, baseURL: gw.baseA, maxRetries: 0 });
    for (const stated of [Number.POSITIVE_INFINITY, 1e300]) {
      const file = webm(3, 32, stated);
      const { response } = await client.audio.transcriptions
        .create({ file: await toFile(file, 'lying.webm'), model: 'openai/whisper-large-v3' })
        .withResponse();
      expect(response.status, String(stated)).toBe(200);
      await gw.gateway.services.usage.flush();
      const [record] = await gw.gateway.services.store.usage.list({ requestId: response.headers.get('x-request-id') as string });
      // At most the file's bytes at 10 a second (80 bit/s, below any codec's silence), as a bound is, up to a minute.
      expect(record?.units, String(stated)).toBeGreaterThan(0);
      expect(record?.units, String(stated)).toBeLessThanOrEqual(Math.ceil(file.length / 10 / 60) * 60);
      expect(Number.isFinite(record?.cost), String(stated)).toBe(true);
    }
  });
});

describe('a file named for no audio format is sent named for its content', () => {
  it('RF64 as .wav, FLAC after an ID3 tag as .flac (not .mp3), an MP3 after zeros as .mp3', async () => {
    const client = new OpenAI({ apiKey: key.key, baseURL: gw.baseA, maxRetries: 0 });
    const sent: [string, Buffer, string][] = [
      ['field', rf64(wav(1)), 'field.wav'],
      ['take.bin', id3Tagged(flac(1)), 'take.bin.flac'],
      ['padded', zeroPadded(mp3(1), 1000), 'padded.mp3'],
    ];
    for (const [name, file, upstream] of sent) {
      await client.audio.transcriptions.create({ file: await toFile(file, name), model: 'openai/whisper-large-v3' });
      expect((sim.providers.scaleway?.stats().last?.body as { files: { filename: string }[] } | undefined)?.files[0]?.filename).toBe(upstream);
    }
  });
});

describe('zero bytes before no audio are no audio', () => {
  it('all zeros, or zeros then bytes that are no MP3 frames, are refused in each variant before any provider is called', async () => {
    const files = [Buffer.alloc(20_000), Buffer.concat([Buffer.alloc(5000), Buffer.from('No tag, nor frames: \xff\xfb\x90\xc4', 'latin1')])];
    for (const file of files) {
      for (const [base, type] of [
        [gw.baseA, 'validation_error'],
        [gw.baseB, 'invalid_request_error'],
      ]) {
        const client = new OpenAI({ apiKey: key.key, baseURL: base, maxRetries: 0 });
        const err = await client.audio.transcriptions.create({ file: await toFile(file, 'a.mp3'), model: 'openai/whisper-large-v3' }).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(OpenAI.BadRequestError);
        expect((err as InstanceType<typeof OpenAI.BadRequestError>).error).toMatchObject({ type, param: 'file' });
      }
    }
    expect(sim.providers.scaleway?.stats().byEndpoint['transcriptions'] ?? 0).toBe(0);
  });
});
