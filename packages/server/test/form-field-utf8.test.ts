import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { wav } from './helpers/audio.js';
import { startGateway, type TestGateway } from './helpers/gateway.js';

/**
 * A transcription form's text fields reach the provider as the client wrote them: in UTF-8, exactly; in another
 * encoding (a prompt typed in a Latin-1 terminal, `curl -F prompt=<notes.txt`), refused with the variant's 400
 * naming the field, as a JSON body of such bytes is, where the provider was sent U+FFFD in place of each accent.
 */
let gw: TestGateway;
let key: string;

beforeAll(async () => {
  gw = await startGateway();
  key = (await gw.createKey({ rateLimitRpm: 10_000 })).key;
}, 60_000);
afterAll(async () => {
  await gw?.close();
});

const BOUNDARY = 'form-boundary-7MA4YWxkTrZu0gW';

/** A form of `fields` (their values as bytes, sent as they are) and a short WAV. */
function form(fields: Record<string, Buffer>): Buffer {
  const parts: Buffer[] = [];
  for (const [name, value] of Object.entries(fields)) {
    parts.push(Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n`), value, Buffer.from('\r\n'));
  }
  parts.push(Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\n`));
  parts.push(wav(1), Buffer.from(`\r\n--${BOUNDARY}--\r\n`));
  return Buffer.concat(parts);
}

async function transcribe(base: string, fields: Record<string, Buffer>) {
  const res = await fetch(`${base}/audio/transcriptions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': `multipart/form-data; boundary=${BOUNDARY}` },
    body: form(fields),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

const sentFields = () => ((gw.sim.providers.scaleway?.stats().last?.body ?? {}) as { fields: Record<string, string[]> }).fields;

describe('a transcription form field that is not UTF-8', () => {
  it('passes a UTF-8 prompt to the provider exactly', async () => {
    const prompt = 'Café, naïve, 日本語, 🎉';
    const res = await transcribe(gw.baseA, { model: Buffer.from('openai/whisper-large-v3'), prompt: Buffer.from(prompt) });
    expect(res.status).toBe(200);
    expect(sentFields().prompt).toEqual([prompt]);
  });

  it('refuses a Latin-1 prompt with the 400 of each variant naming the field, and calls no provider', async () => {
    const latin1 = Buffer.from('Caf\xe9 na\xefve', 'latin1');
    const before = gw.sim.providers.scaleway?.stats().total;
    const a = await transcribe(gw.baseA, { model: Buffer.from('openai/whisper-large-v3'), prompt: latin1 });
    expect(a.status).toBe(400);
    expect(a.body).toMatchObject({ error: { type: 'validation_error', code: 'validation_error', param: 'prompt' } });
    expect((a.body.error as { message: string }).message).toContain('not valid UTF-8');
    const b = await transcribe(gw.baseB, { model: Buffer.from('openai/whisper-large-v3'), prompt: latin1 });
    expect(b.status).toBe(400);
    expect(b.body).toMatchObject({ error: { type: 'invalid_request_error', code: 'invalid_request', param: 'prompt' } });
    expect(gw.sim.providers.scaleway?.stats().total).toBe(before);
  });
});
