/**
 * OpenAI-format transcription (`/v1/audio/transcriptions`): json, text, srt, vtt, verbose_json (PROVIDERS §1.5).
 * OVH's (§6) defaults to verbose_json, numbers segments from 1 and adds `success` and `diarization`.
 */
import { field, fieldAll } from '../core/multipart.js';
import { isAudio, toSrt, toVtt, transcribe } from '../gen/audio.js';
import type { HandlerCtx, Reply } from './types.js';

const FORMATS = ['json', 'text', 'srt', 'verbose_json', 'vtt'];
const GPT_TRANSCRIBE_ONLY = ['keywords', 'languages'];

export function transcriptionReply(ctx: HandlerCtx, maxBytes: number, ovh = false): Reply {
  const mp = ctx.multipart;
  if (mp === null) return { type: 'error', error: { status: 400, kind: 'bad_request', message: 'Expected multipart/form-data' } };
  const model = ctx.model;
  if (model === null) return { type: 'error', error: { status: 400, kind: 'bad_request', message: 'Field required: model', param: 'model' } };
  if (!ctx.provider.hosts(model)) return { type: 'error', error: { status: 404, kind: 'model_not_found', model, param: 'model' } };
  if (ctx.provider.info(model).kind !== 'audio') {
    return { type: 'error', error: { status: 400, kind: 'bad_request', message: `Model ${model} does not support transcription.`, param: 'model' } };
  }
  const file = mp.files.find((f) => f.field === 'file');
  if (!file) return { type: 'error', error: { status: 400, kind: 'bad_request', message: 'Field required: file', param: 'file' } };
  if (file.data.length > maxBytes)
    return { type: 'error', error: { status: 413, kind: 'too_large', message: `File too large: the limit is ${maxBytes / 1024 / 1024} MB`, param: 'file' } };
  // OpenAI's words for bytes its decoder cannot read (the OpenAI-compatible hosts run the same Whisper stack).
  if (!isAudio(file.data))
    return { type: 'error', error: { status: 400, kind: 'bad_request', message: 'Audio file might be corrupted or unsupported', param: 'file' } };
  // OpenAI's `keywords[]` and `languages[]` are gpt-transcribe's (PROVIDERS §1.5 has neither for Whisper): refused, as
  // OpenAI's API refuses a parameter the model does not take.
  for (const name of GPT_TRANSCRIBE_ONLY) {
    if (fieldAll(mp, name).length > 0) {
      return {
        type: 'error',
        error: { status: 400, kind: 'bad_request', message: `Unsupported parameter: '${name}' is not supported with this model.`, param: name },
      };
    }
  }
  const format = field(mp, 'response_format') ?? (ovh ? 'verbose_json' : 'json');
  if (!FORMATS.includes(format)) {
    return {
      type: 'error',
      error: { status: 400, kind: 'bad_request', message: `response_format must be one of ${FORMATS.join(', ')}`, param: 'response_format' },
    };
  }
  const t = transcribe(file.data);
  const tokens = t.words.length;
  const usage = { type: 'duration', seconds: Math.ceil(t.duration) };
  switch (format) {
    case 'text':
      return { type: 'text', body: `${t.text}\n`, contentType: 'text/plain; charset=utf-8', tokens };
    case 'srt':
      return { type: 'text', body: toSrt(t), contentType: 'application/x-subrip', tokens };
    case 'vtt':
      return { type: 'text', body: toVtt(t), contentType: 'text/vtt', tokens };
    case 'json':
      return { type: 'json', body: { text: t.text, usage }, tokens };
  }
  const granularities = fieldAll(mp, 'timestamp_granularities');
  const body: Record<string, unknown> = {
    task: 'transcribe',
    language: field(mp, 'language') ?? 'en',
    duration: t.duration,
    text: t.text,
    segments: t.segments.map((s, i) => ({
      id: ovh ? i + 1 : i,
      seek: 0,
      start: s.start,
      end: s.end,
      text: ` ${s.text}`,
      tokens: s.words.map((_, i) => 50_364 + i),
      temperature: 0,
      avg_logprob: -0.21,
      compression_ratio: 0.88,
      no_speech_prob: 0.01,
    })),
    usage,
  };
  if (granularities.includes('word')) body['words'] = t.words;
  if (ovh) {
    body['success'] = true;
    body['diarization'] = field(mp, 'diarize') === 'true' ? t.segments.map((s) => ({ speaker: 0, text: s.text, start: s.start, end: s.end })) : [];
  }
  return { type: 'json', body, tokens };
}
