import net from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type Simulator, startSimulator } from '../src/index.js';
import { must, parseSse, stream, userMessages, wav } from './helpers.js';

let sim: Simulator;
beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0, only: ['nebius', 'mistral'] });
});
afterAll(() => sim.close());
afterEach(() => sim.reset());
const nb = () => must(sim.providers['nebius']);
const model = 'meta-llama/Llama-3.3-70B-Instruct';

/** Raw HTTP/1.1 request whose reader pauses for `pauseMs` before reading anything. */
function slowRead(url: string, path: string, headers: Record<string, string>, body: string, pauseMs: number): Promise<string> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const sock = net.connect(Number(u.port), u.hostname);
    const parts: Buffer[] = [];
    sock.pause();
    const head = Object.entries({ ...headers, host: u.host, 'content-length': String(Buffer.byteLength(body)), connection: 'close' })
      .map(([k, v]) => `${k}: ${v}`)
      .join('\r\n');
    sock.write(`POST ${path} HTTP/1.1\r\n${head}\r\n\r\n${body}`);
    setTimeout(() => sock.resume(), pauseMs);
    sock.on('data', (d: Buffer) => parts.push(d));
    sock.on('end', () => resolve(Buffer.concat(parts).toString('utf8')));
    sock.on('error', reject);
  });
}

describe('streaming', () => {
  it('delivers a long stream intact to a reader that stalls (backpressure), honouring answerTokens', async () => {
    nb().configure({ answerTokens: 40_000 });
    const body = JSON.stringify({ model, messages: userMessages('alpha beta gamma'), stream: true });
    const raw = await slowRead(nb().url, '/v1/chat/completions', { authorization: `Bearer ${nb().apiKey}`, 'content-type': 'application/json' }, body, 300);
    const payload = raw.slice(raw.indexOf('\r\n\r\n') + 4);
    const dechunked = payload.replace(/\r\n[0-9a-f]+\r\n/g, '').replace(/^[0-9a-f]+\r\n/, '');
    const frames = parseSse(dechunked);
    expect(frames.at(-1)?.data).toBe('[DONE]');
    const content = frames.filter((f) => f.data !== '[DONE]' && JSON.parse(f.data).choices[0]?.delta?.content);
    expect(content).toHaveLength(40_000);
  });

  it('paces chunks by the configured gap and first-token time', async () => {
    nb().configure({ ttftMs: 60, chunkGapMs: 10 });
    const t0 = performance.now();
    const s = await stream(nb(), '/v1/chat/completions', { model, messages: userMessages('one two'), stream: true });
    const elapsed = performance.now() - t0;
    expect(elapsed).toBeGreaterThanOrEqual(60 + 10 * (s.chunks.length - 1) - 5);
  });

  it('counts a client that goes away mid-stream and frees the request', async () => {
    nb().configure({ chunkGapMs: 20 });
    const ac = new AbortController();
    const res = await fetch(`${nb().url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${nb().apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model, messages: userMessages('abort me please'), stream: true }),
      signal: ac.signal,
    });
    expect(res.status).toBe(200);
    expect(nb().stats().inFlight).toBe(1);
    ac.abort();
    await new Promise((r) => setTimeout(r, 50));
    expect(nb().stats().inFlight).toBe(0);
  });

  it('mistral transcription stream uses named events and no [DONE]', async () => {
    const m = must(sim.providers['mistral']);
    const form = new FormData();
    form.append('model', 'voxtral-mini-latest');
    form.append('stream', 'true');
    form.append('file', new Blob([new Uint8Array(wav(1))]), 'a.wav');
    const res = await fetch(`${m.url}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${m.apiKey}` }, body: form });
    const frames = parseSse(await res.text());
    expect(frames[0]?.event).toBe('transcription.language');
    expect(frames.at(-1)?.event).toBe('transcription.done');
    expect(JSON.parse(must(frames.at(-1)).data).text).toBe('Simulated transcript of 1.0 seconds of audio.');
    expect(frames.some((f) => f.data === '[DONE]')).toBe(false);
  });
});
