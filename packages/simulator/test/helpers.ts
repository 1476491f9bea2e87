/** Test helpers: HTTP calls against a started simulator, SSE parsing. */
import type { SimulatedProvider } from '../src/index.js';

// biome-ignore lint/suspicious/noExplicitAny: wire JSON is inspected freely in tests
export type Json = Record<string, any>;

export function authHeaders(p: SimulatedProvider, key = p.apiKey): Record<string, string> {
  return p.type === 'azure' ? { 'api-key': key } : { authorization: `Bearer ${key}` };
}

export async function call(
  p: SimulatedProvider,
  path: string,
  body?: unknown,
  init: { headers?: Record<string, string>; method?: string; signal?: AbortSignal } = {},
): Promise<Response> {
  const headers: Record<string, string> = { ...authHeaders(p), ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...init.headers };
  return fetch(p.url + path, {
    method: init.method ?? (body === undefined ? 'GET' : 'POST'),
    headers,
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    ...(init.signal ? { signal: init.signal } : {}),
  });
}

export async function json(
  p: SimulatedProvider,
  path: string,
  body?: unknown,
  init: { headers?: Record<string, string> } = {},
): Promise<{ status: number; body: Json; headers: Headers }> {
  const res = await call(p, path, body, init);
  return { status: res.status, body: (await res.json()) as Json, headers: res.headers };
}

export interface SseFrame {
  event?: string;
  data: string;
}

export function parseSse(text: string): SseFrame[] {
  const frames: SseFrame[] = [];
  for (const block of text.split('\n\n')) {
    if (block.trim() === '') continue;
    const frame: SseFrame = { data: '' };
    for (const line of block.split('\n')) {
      if (line.startsWith('event: ')) frame.event = line.slice(7);
      else if (line.startsWith('data: ')) frame.data += line.slice(6);
    }
    frames.push(frame);
  }
  return frames;
}

/** POST a streaming request; returns the parsed frames and whether the stream ended with [DONE]. */
export async function stream(
  p: SimulatedProvider,
  path: string,
  body: unknown,
): Promise<{ status: number; chunks: Json[]; done: boolean; headers: Headers; raw: string }> {
  const res = await call(p, path, body);
  const raw = await res.text();
  const frames = parseSse(raw);
  const done = frames[frames.length - 1]?.data === '[DONE]';
  const chunks = frames.filter((f) => f.data !== '[DONE]').map((f) => JSON.parse(f.data) as Json);
  return { status: res.status, chunks, done, headers: res.headers, raw };
}

export const userMessages = (text: string): Json[] => [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: text },
];

/** A 16 kHz 16-bit mono WAV of `seconds` of silence. */
export function wav(seconds: number): Buffer {
  const data = Math.round(seconds * 32_000);
  const b = Buffer.alloc(44 + data);
  b.write('RIFF', 0, 'ascii');
  b.writeUInt32LE(36 + data, 4);
  b.write('WAVEfmt ', 8, 'ascii');
  b.writeUInt32LE(16, 16);
  b.writeUInt16LE(1, 20);
  b.writeUInt16LE(1, 22);
  b.writeUInt32LE(16_000, 24);
  b.writeUInt32LE(32_000, 28);
  b.writeUInt16LE(2, 32);
  b.writeUInt16LE(16, 34);
  b.write('data', 36, 'ascii');
  b.writeUInt32LE(data, 40);
  return b;
}

export async function upload(p: SimulatedProvider, path: string, fields: Record<string, string | string[]>, file?: Buffer): Promise<Response> {
  const form = new FormData();
  for (const [k, v] of Object.entries(fields)) for (const x of Array.isArray(v) ? v : [v]) form.append(k, x);
  if (file) form.append('file', new Blob([new Uint8Array(file)], { type: 'audio/wav' }), 'clip.wav');
  return fetch(p.url + path, { method: 'POST', headers: authHeaders(p), body: form });
}

/** The value, or a thrown error when it is null or undefined (instead of a non-null assertion). */
export function must<T>(v: T | null | undefined, what = 'value'): T {
  if (v === null || v === undefined) throw new Error(`expected a ${what}`);
  return v;
}
