import type { Server } from 'node:http';
import type { GatewayFileConfig } from '@gw/schema';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { mp3, wav } from './helpers/audio.js';
import { startGateway, type TestGateway } from './helpers/gateway.js';
import { answerModelList, startRawUpstream } from './helpers/raw-upstream.js';

// The file part a provider gets is described by the gateway, from the container it read (as its file name is), not
// by the Content-Type the client wrote on its own part: those are the client's bytes, quotes and control characters
// included, written into the part header of the gateway's request.

let upstream: Server;
let received: string[] = [];
let gw: TestGateway;
let key: string;

function catalogue(baseUrl: string) {
  return (c: GatewayFileConfig): GatewayFileConfig => ({
    providers: [...c.providers, { id: 'host', type: 'openai', baseUrl, region: 'fr-par' }],
    models: [
      ...c.models,
      {
        id: 'edge/whisper',
        kind: 'audio',
        owned_by: 'test',
        offers: [{ provider: 'host', upstreamModel: 'w', pricing: { prompt_per_1m: 0, completion_per_1m: 0, per_unit: 0.0001, currency: 'EUR' } }],
      },
    ],
  });
}

beforeAll(async () => {
  const started = await startRawUpstream((req, res, body) => {
    if (req.method === 'GET') return answerModelList(res, ['w']);
    received.push(body);
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ text: 'bonjour', language: 'fr', duration: 1, segments: [], usage: { type: 'duration', seconds: 1 } }));
  });
  upstream = started.server;
  gw = await startGateway({ catalogue: catalogue(started.baseUrl) });
  key = (await gw.createKey({ rateLimitRpm: 10_000 })).key;
}, 60_000);
afterAll(async () => {
  await gw?.close();
  upstream?.close();
});
beforeEach(() => {
  received = [];
});

/** A form whose file part carries `partType` as its Content-Type, written byte for byte. */
function form(file: Buffer, filename: string, partType: string): { body: Buffer; type: string } {
  const b = 'client-boundary-1';
  const head = `--${b}\r\nContent-Disposition: form-data; name="model"\r\n\r\nedge/whisper\r\n--${b}\r\nContent-Disposition: form-data; name="file"; filename="${filename}"\r\nContent-Type: ${partType}\r\n\r\n`;
  return { body: Buffer.concat([Buffer.from(head, 'latin1'), file, Buffer.from(`\r\n--${b}--\r\n`)]), type: `multipart/form-data; boundary=${b}` };
}

/** The Content-Type of the file part in the one request the provider received. */
function sentPartType(): string | undefined {
  expect(received).toHaveLength(1);
  return /filename="[^"]*"\r\nContent-Type: ([^\r\n]*)\r\n/.exec(received[0] as string)?.[1];
}

async function transcribe(file: Buffer, filename: string, partType: string): Promise<number> {
  const { body, type } = form(file, filename, partType);
  const res = await fetch(`${gw.baseA}/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': type }, body });
  await res.arrayBuffer();
  return res.status;
}

describe("an upload's part type, upstream", () => {
  it("is the container's, not the client's bytes (quotes, control characters, a long value)", async () => {
    expect(await transcribe(wav(1), 'take.wav', `audio/wav"; name="x\x01\x7f; ${'p'.repeat(8000)}`)).toBe(200);
    expect(sentPartType()).toBe('audio/wav');
  });

  it("is the container's where the client named another type, as its file name is", async () => {
    expect(await transcribe(mp3(1), 'voice', 'video/webm')).toBe(200);
    expect(received[0]).toContain('filename="voice.mp3"');
    expect(sentPartType()).toBe('audio/mpeg');
  });
});
