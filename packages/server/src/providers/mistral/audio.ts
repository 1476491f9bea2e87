import { UpstreamError } from '../../errors/upstream-error.js';
import type { JsonResponse } from '../http-client.js';
import { seconds as audioSeconds } from '../openai-compatible/audio.js';
import { tokenCount } from '../token-count.js';
import type { Transcription, TranscriptionRequest, TranscriptSegment, TranscriptWord } from '../types.js';
import { mistralError } from './errors.js';

/**
 * Voxtral's form: no `response_format` and no `prompt` (its schema has
 * neither), and `timestamp_granularities` only without `language` (Mistral
 * refuses both together): the client's language wins, and timings are
 * then built by the gateway from the text alone. Keywords are its
 * `context_bias`, one field a term (as Mistral's own client sends the list).
 */
export function voxtralFields(request: TranscriptionRequest, upstreamModel: string): { fields: [string, string][]; granularity: 'word' | 'segment' | null } {
  const fields: [string, string][] = [['model', upstreamModel]];
  if (request.temperature !== undefined) fields.push(['temperature', String(request.temperature)]);
  if (request.keywords) for (const term of request.keywords) fields.push(['context_bias', term]);
  let granularity: 'word' | 'segment' | null = null;
  if (request.language !== undefined) fields.push(['language', request.language]);
  else if (request.granularities.includes('word')) granularity = 'word';
  else if (request.needSegments || request.granularities.includes('segment')) granularity = 'segment';
  if (granularity) fields.push(['timestamp_granularities', granularity]);
  return { fields, granularity };
}

/**
 * `{model, text, language, segments, usage}` → the gateway's transcript.
 * Voxtral has no `duration`: it is `usage.prompt_audio_seconds` (whole
 * seconds) or the last timing, whichever is later. With word timings
 * asked, Mistral returns the words as segments.
 */
export function parseVoxtral(provider: string, res: JsonResponse, request: TranscriptionRequest, granularity: 'word' | 'segment' | null): Transcription {
  if (res.status < 200 || res.status >= 300) throw mistralError(provider, res);
  const body = res.body as Record<string, unknown> | null;
  if (!body || typeof body['text'] !== 'string')
    throw new UpstreamError({ kind: 'protocol', provider, message: `${provider} sent a transcription without text` });
  const raw = Array.isArray(body['segments']) ? body['segments'].map(toSegment) : [];
  const usage = (body['usage'] ?? {}) as { prompt_audio_seconds?: unknown; prompt_tokens?: unknown; completion_tokens?: unknown };
  const input = tokenCount(usage.prompt_tokens);
  const seconds = audioSeconds(usage.prompt_audio_seconds);
  const lastEnd = raw.at(-1)?.end ?? 0;
  const words: TranscriptWord[] | null = granularity === 'word' ? raw.map((s) => ({ word: s.text.trim(), start: s.start, end: s.end })) : null;
  const language = typeof body['language'] === 'string' ? body['language'] : (request.language ?? null);
  return {
    text: body['text'],
    language,
    duration: Math.max(seconds ?? 0, lastEnd),
    segments: granularity === 'segment' && raw.length > 0 ? raw : null,
    words,
    billedSeconds: seconds ?? Math.ceil(lastEnd),
    // Its audio and prompt tokens, and the transcript's: what an offer priced per token is billed.
    tokens: input === null ? null : { input, output: tokenCount(usage.completion_tokens) ?? 0 },
  };
}

function toSegment(raw: unknown): TranscriptSegment {
  const s = (raw ?? {}) as Record<string, unknown>;
  const n = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : 0);
  return { start: n(s['start']), end: n(s['end']), text: typeof s['text'] === 'string' ? s['text'] : '' };
}
