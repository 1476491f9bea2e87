import { type Simulator, startSimulator } from '@gw/simulator';
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { flac, m4a, mp3, mp3AfterGap, mp3Vbr, oggOpus, webm } from './helpers/audio.js';
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
  ['blob.webm', () => webm(12)],
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
