import { isWave } from '@gw/schema';
import type { TimestampGranularity, Transcription, TranscriptSegment, TranscriptWord } from '../providers/types.js';
import { whisperLanguage } from './whisper-language.js';

export const RESPONSE_FORMATS = ['json', 'text', 'srt', 'vtt', 'verbose_json'] as const;
export type ResponseFormat = (typeof RESPONSE_FORMATS)[number];

export interface RenderOptions {
  granularities: TimestampGranularity[];
  /** The tokens an offer priced per token billed: the answer's usage is then OpenAI's `{type: "tokens"}`, not seconds. */
  billedTokens?: { input: number; output: number };
  language?: string;
  temperature?: number;
}

export interface Rendered {
  contentType: string;
  body: string | Record<string, unknown>;
}

/** Whisper-style segments are at most 30 s of audio. */
const SEGMENT_SECONDS = 30;

/**
 * Every response_format from one transcript, whatever the provider sent:
 * providers without a format (Voxtral has no verbose_json, srt or vtt)
 * get it built here from their text and timings.
 */
export function renderTranscription(t: Transcription, format: ResponseFormat, options: RenderOptions): Rendered {
  const tokens = options.billedTokens;
  const usage = tokens
    ? { type: 'tokens', input_tokens: tokens.input, output_tokens: tokens.output, total_tokens: tokens.input + tokens.output }
    : { type: 'duration', seconds: t.billedSeconds };
  switch (format) {
    case 'json':
      return { contentType: 'application/json; charset=utf-8', body: { text: t.text, usage } };
    case 'text':
      return { contentType: 'text/plain; charset=utf-8', body: `${t.text}\n` };
    case 'srt':
      return { contentType: 'text/plain; charset=utf-8', body: cues(segmentsOf(t), ',') };
    case 'vtt':
      return { contentType: 'text/vtt; charset=utf-8', body: `WEBVTT\n\n${cues(segmentsOf(t), '.')}` };
    case 'verbose_json':
      return { contentType: 'application/json; charset=utf-8', body: verbose(t, options, usage) };
  }
}

function verbose(t: Transcription, options: RenderOptions, usage: Record<string, unknown>): Record<string, unknown> {
  const segments = segmentsOf(t).map((s, id) => ({
    id,
    seek: 0,
    start: s.start,
    end: s.end,
    text: s.text,
    tokens: [],
    temperature: options.temperature ?? 0,
    avg_logprob: 0,
    compression_ratio: 0,
    no_speech_prob: 0,
    ...s.extra,
  }));
  const body: Record<string, unknown> = {
    task: 'transcribe',
    // Named as OpenAI names it (`english`), whichever code the provider or the client gave.
    language: whisperLanguage(t.language ?? options.language ?? 'unknown'),
    duration: t.duration,
    text: t.text,
    segments,
  };
  if (options.granularities.includes('word')) body['words'] = t.words ?? spreadWords(segmentsOf(t));
  body['usage'] = usage;
  return body;
}

/** The provider's segments; else words grouped into 30-second segments; else the whole text as one. */
export function segmentsOf(t: Transcription): TranscriptSegment[] {
  if (t.segments && t.segments.length > 0) return t.segments;
  if (t.words && t.words.length > 0) {
    const out: TranscriptSegment[] = [];
    for (const w of t.words) {
      const last = out.at(-1);
      if (last && w.end - last.start <= SEGMENT_SECONDS) {
        last.end = w.end;
        last.text += ` ${w.word}`;
      } else out.push({ start: w.start, end: w.end, text: w.word });
    }
    return out;
  }
  return [{ start: 0, end: t.duration, text: t.text }];
}

/** Word timings a provider did not send: each segment's words spread evenly over it (an approximation, said so in docs/adapters.md). */
function spreadWords(segments: TranscriptSegment[]): TranscriptWord[] {
  return segments.flatMap((s) => {
    const words = s.text.trim().split(/\s+/).filter(Boolean);
    const step = (s.end - s.start) / Math.max(1, words.length);
    return words.map((word, i) => ({ word, start: round(s.start + i * step), end: round(s.start + (i + 1) * step) }));
  });
}

function cues(segments: TranscriptSegment[], sep: ',' | '.'): string {
  return segments.map((s, i) => `${sep === ',' ? `${i + 1}\n` : ''}${stamp(s.start, sep)} --> ${stamp(s.end, sep)}\n${s.text.trim()}\n`).join('\n');
}

function stamp(seconds: number, sep: string): string {
  const ms = Math.max(0, Math.round(seconds * 1000));
  const pad = (n: number, w = 2) => String(n).padStart(w, '0');
  return `${pad(Math.floor(ms / 3_600_000))}:${pad(Math.floor((ms % 3_600_000) / 60_000))}:${pad(Math.floor((ms % 60_000) / 1000))}${sep}${pad(ms % 1000, 3)}`;
}

function round(x: number): number {
  return Math.round(x * 100) / 100;
}

/** Below the lowest byte rate of speech codecs (AMR-NB at 4.75 kbit/s, Opus at 6): the most seconds a non-WAV upload can hold. */
const MIN_BYTES_PER_SECOND = 500;

/**
 * The most audio seconds an upload can hold, for the budget hold: its size
 * at a WAV header's byte rate, else at the lowest speech byte rate.
 */
export function worstCaseSeconds(head: Buffer, size: number): number {
  return Math.ceil(size / (wavByteRate(head) ?? MIN_BYTES_PER_SECOND));
}

/** Characters of speech a second (about 150 words a minute): a transcript's length when nothing else tells it. */
const SPOKEN_CHARS_PER_SECOND = 15;

/**
 * The audio's length when its provider told none (no `duration`, segments or usage: a host answering `json` whatever
 * was asked), billed rounded up and told as the transcript's `duration`: a WAV upload's own, its `data` chunk (at
 * most the bytes the file has) at its header's byte rate; a compressed one's as its container tells it (`own`);
 * otherwise the transcript's text at about 15 characters a second, at most what the upload can hold.
 */
export function untoldSeconds(head: Buffer, size: number, text: string, own: number | null): number {
  const rate = wavByteRate(head);
  const data = rate === null ? null : wavData(head);
  if (rate !== null && data !== null) {
    // A size of 0 is a writer that streamed and never went back to set it: the audio runs to the end, as decoders read it.
    return (data.size > 0 ? Math.min(data.size, size - data.start) : size - data.start) / rate;
  }
  // A container's own length is the decoder's, though above the bytes at the lowest speech rate (a quiet recording).
  return own !== null && own > 0 ? own : Math.min(worstCaseSeconds(head, size), text.length / SPOKEN_CHARS_PER_SECOND);
}

/** Where a RIFF/WAVE file's audio begins (past its `data` chunk's header) and the size that header gives, or null when `head` does not reach it. */
function wavData(head: Buffer): { start: number; size: number } | null {
  let at = 12;
  while (at + 8 <= head.length) {
    const size = head.readUInt32LE(at + 4);
    if (head.toString('ascii', at, at + 4) === 'data') return { start: at + 8, size: size === 0xffffffff ? ds64DataSize(head, size) : size };
    at += 8 + size + (size % 2);
  }
  return null;
}

/**
 * An RF64/BW64 file's `data` size, from its `ds64` chunk (first, its 64-bit RIFF size then data size), for the
 * `0xFFFFFFFF` its `data` chunk states. A streamed RIFF states it too, without a `ds64`: the audio runs to the end.
 */
function ds64DataSize(head: Buffer, stated: number): number {
  return head.toString('ascii', 12, 16) === 'ds64' && head.length >= 36 ? Number(head.readBigUInt64LE(28)) : stated;
}

/**
 * The byte rate of a RIFF/WAVE header's `fmt ` chunk (null when it is not one, or the chunk is not within `head`): the
 * lowest of the rate it states and the rates its sample rate, block size and sample width give, since decoders time
 * PCM by the latter and a header can state a byte rate that does not match them. The chunk is looked for past any
 * that come before it (Core Audio writes a `JUNK` chunk first, broadcast WAV recorders a `bext`), up to `data`.
 */
export function wavByteRate(head: Buffer): number | null {
  if (!isWave(head)) return null;
  let at = 12;
  while (at + 8 <= head.length) {
    const id = head.toString('ascii', at, at + 4);
    if (id === 'data') return null;
    if (id === 'fmt ') return at + 24 <= head.length ? fmtByteRate(head, at + 8) : null;
    const size = head.readUInt32LE(at + 4);
    at += 8 + size + (size % 2);
  }
  return null;
}

/** The lowest byte rate a `fmt ` chunk's fields give, from the chunk's body at `at`. */
function fmtByteRate(head: Buffer, at: number): number | null {
  const channels = head.readUInt16LE(at + 2);
  const sampleRate = head.readUInt32LE(at + 4);
  const stated = head.readUInt32LE(at + 8);
  const blockAlign = head.readUInt16LE(at + 12);
  const bits = head.readUInt16LE(at + 14);
  const rates = [stated, sampleRate * blockAlign, (sampleRate * channels * bits) / 8].filter((r) => r > 0);
  return rates.length > 0 ? Math.min(...rates) : null;
}
