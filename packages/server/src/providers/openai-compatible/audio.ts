import type { JsonResponse } from '../http-client.js';
import { tokenCount } from '../token-count.js';
import type { Transcription, TranscriptionRequest, TranscriptSegment, TranscriptWord } from '../types.js';
import { protocol } from './embeddings.js';
import { httpError } from './errors.js';

/** Form fields for OpenAI's `/audio/transcriptions`: always verbose_json, so every format can be built from one answer. */
export function transcriptionFields(request: TranscriptionRequest, upstreamModel: string): [string, string][] {
  const fields: [string, string][] = [
    ['model', upstreamModel],
    ['response_format', 'verbose_json'],
  ];
  if (request.language !== undefined) fields.push(['language', request.language]);
  const prompt = whisperPrompt(request);
  if (prompt !== undefined) fields.push(['prompt', prompt]);
  if (request.temperature !== undefined) fields.push(['temperature', String(request.temperature)]);
  const granularities = request.granularities.length > 0 ? request.granularities : ['segment'];
  for (const g of granularities) fields.push(['timestamp_granularities[]', g]);
  return fields;
}

/**
 * Keywords go into the prompt, Whisper's documented way to have names and terms spelled as written (OpenAI's
 * `keywords[]` is gpt-transcribe's alone): listed after the client's prompt, as Whisper reads only its last 224 tokens.
 */
function whisperPrompt(request: TranscriptionRequest): string | undefined {
  if (!request.keywords) return request.prompt;
  const terms = request.keywords.join(', ');
  return request.prompt === undefined ? terms : `${request.prompt} ${terms}`;
}

/** The keys of a Whisper segment beyond start/end/text, kept for verbose_json. */
const SEGMENT_EXTRAS = ['seek', 'tokens', 'temperature', 'avg_logprob', 'compression_ratio', 'no_speech_prob'];

/**
 * OpenAI's verbose_json (also OVH's, whose extra `success` and
 * `diarization` are dropped and whose segment ids start at 1) → the
 * gateway's transcript.
 */
export function parseVerboseTranscription(provider: string, res: JsonResponse): Transcription {
  if (res.status < 200 || res.status >= 300) throw httpError(provider, res);
  const body = res.body as Record<string, unknown> | null;
  if (!body || typeof body !== 'object' || typeof body['text'] !== 'string') throw protocol(provider, 'a transcription without text');
  const segments = Array.isArray(body['segments']) ? body['segments'].map(toSegment) : null;
  const words = Array.isArray(body['words']) ? body['words'].flatMap(toWord) : null;
  // A length that is no number of seconds (negative, text) is none: the next reading is taken.
  const duration = seconds(body['duration']) ?? segments?.at(-1)?.end ?? 0;
  const usage = body['usage'] as { type?: unknown; seconds?: unknown; input_tokens?: unknown; output_tokens?: unknown } | undefined;
  const billed = (usage?.type === 'duration' ? seconds(usage.seconds) : null) ?? Math.ceil(duration);
  // A token-billed model's count (gpt-4o-transcribe's `{type: "tokens"}`), for an offer priced per token.
  const input = usage?.type === 'tokens' ? tokenCount(usage.input_tokens) : null;
  return {
    text: body['text'],
    language: typeof body['language'] === 'string' ? body['language'] : null,
    duration,
    segments,
    words,
    billedSeconds: billed,
    tokens: input === null ? null : { input, output: tokenCount(usage?.output_tokens) ?? 0 },
  };
}

function toSegment(raw: unknown): TranscriptSegment {
  const s = (raw ?? {}) as Record<string, unknown>;
  const extra: Record<string, unknown> = {};
  for (const key of SEGMENT_EXTRAS) if (s[key] !== undefined) extra[key] = s[key];
  return { start: num(s['start']), end: num(s['end']), text: typeof s['text'] === 'string' ? s['text'] : '', extra };
}

function toWord(raw: unknown): TranscriptWord[] {
  const w = (raw ?? {}) as Record<string, unknown>;
  return typeof w['word'] === 'string' ? [{ word: w['word'], start: num(w['start']), end: num(w['end']) }] : [];
}

/** A length in seconds, when it is one: a finite number, not negative. */
export function seconds(v: unknown): number | null {
  return typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : null;
}

function num(v: unknown): number {
  return typeof v === 'number' && Number.isFinite(v) ? v : 0;
}
