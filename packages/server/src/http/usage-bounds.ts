/**
 * The most a request can cost its provider, whatever the provider reports: a count above it is billed at it, with a
 * warning naming the provider (docs/decisions.md, reported usage is bounded). A text cannot tokenize into more tokens
 * than its UTF-8 bytes (byte-level BPE gives at most one token a byte), and a JSON body holds each of its strings in
 * at least as many bytes, so the body's length bounds its text; templates add a few special tokens a message and some
 * instructions once, media parts what prompt-media.ts counts for them. No honest provider counts more: a host that
 * claimed a billion prompt tokens for a 10-token prompt billed, and spent a budget, for a billion.
 *
 * Each check first compares the report with the body's bytes, below every bound here: the bound is worked out only
 * for a count above them.
 */
import type { FastifyBaseLogger } from 'fastify';
import type { RerankRequest, RerankResult, Transcription } from '../providers/types.js';
import { AUDIO_TOKENS_PER_SECOND, promptMedia } from './prompt-media.js';

/** Special tokens a chat template puts around one message (role markers, turn ends): Llama 3 adds 5, OpenAI about 4. */
const MESSAGE_TEMPLATE_TOKENS = 16;
/** What a chat template adds once a prompt: a default system prompt, tool-use instructions (a few hundred at Llama 3.1, Qwen). */
const PROMPT_TEMPLATE_TOKENS = 1024;
/** Special tokens a model adds around one text it embeds or a pair it ranks (`[CLS]`, `[SEP]`, an instruction prefix). */
const TEXT_TEMPLATE_TOKENS = 16;
/** Cohere's billing chunk of a rerank: a document past this many tokens with the query counts once more a chunk. */
const RERANK_CHUNK_TOKENS = 500;

/** The most an image counts at any vision model EU hosts serve: Qwen2.5-VL's largest, 12,845,056 pixels at 28 x 28 a token. */
const IMAGE_TOKENS_MAX = 16_384;
/**
 * Audio or a document the provider fetches itself (by URL, a file by its id): its length is unknown here, and only the
 * model's own context bounds it (the configured `context_window` may be below the model's real one): the largest any
 * model has, 2^20.
 */
const FETCHED_MEDIA_TOKENS = 1_048_576;

/** The most prompt tokens a chat request can be counted: its body's bytes, its messages' template and its media. */
function chatPromptBound(bodyBytes: number, body: { messages: unknown[] }): number {
  return bodyBytes + PROMPT_TEMPLATE_TOKENS + body.messages.length * MESSAGE_TEMPLATE_TOKENS + mediaBound(body.messages);
}

/**
 * The most the media parts can count: what the budget hold counts for them (inline audio by its seconds, a document
 * by its pages: prompt-media.ts), and on top of it {@link IMAGE_TOKENS_MAX} for every part, and
 * {@link FETCHED_MEDIA_TOKENS} for audio or a document not given inline.
 */
function mediaBound(messages: unknown[]): number {
  let tokens = promptMedia(messages)?.tokens ?? 0;
  for (const m of messages) {
    const content = (m as { content?: unknown }).content;
    if (!Array.isArray(content)) continue;
    for (const part of content as { type?: unknown; input_audio?: unknown; file?: { file_data?: unknown } | null; document_url?: unknown }[]) {
      const type = part?.type;
      if (type === 'text' || type === 'refusal' || type === 'thinking') continue;
      tokens += IMAGE_TOKENS_MAX;
      if (type === 'image_url') continue;
      const audio = part?.input_audio;
      const data =
        type === 'input_audio'
          ? typeof audio === 'string'
            ? audio
            : (audio as { data?: unknown } | null)?.data
          : type === 'file'
            ? part?.file?.file_data
            : part?.document_url;
      if (typeof data !== 'string' || data.startsWith('http://') || data.startsWith('https://')) tokens += FETCHED_MEDIA_TOKENS;
    }
  }
  return tokens;
}

/** A chat answer's prompt count, at most {@link chatPromptBound}. `bodyBytes` 0: not known, not bounded. */
export function promptTokensAtMost(reported: number, bodyBytes: number, body: { messages: unknown[] }): number {
  if (reported <= bodyBytes || bodyBytes === 0) return reported;
  return Math.min(reported, chatPromptBound(bodyBytes, body));
}

/** {@link promptTokensAtMost}, a count above the bound logged. */
export function billedPromptTokens(log: FastifyBaseLogger, provider: string, reported: number, bodyBytes: number, body: { messages: unknown[] }): number {
  const billed = promptTokensAtMost(reported, bodyBytes, body);
  if (billed < reported) warnAbove(log, provider, 'prompt tokens', reported, billed);
  return billed;
}

/** The most tokens an embedding of `texts` can be counted: the body's bytes hold theirs. `bodyBytes` 0: not known, no bound. */
export function embeddingTokensBound(bodyBytes: number, texts: number): number {
  return bodyBytes === 0 ? Number.POSITIVE_INFINITY : bodyBytes + texts * TEXT_TEMPLATE_TOKENS;
}

/** A reported count, at most `bound`: one above it is billed at it, and logged. */
export function countAtMost(log: FastifyBaseLogger, provider: string, what: string, reported: number, bound: number): number {
  if (reported <= bound) return reported;
  warnAbove(log, provider, what, reported, bound);
  return bound;
}

/**
 * A rerank's reported tokens and search units, each at most what its query with each document could be counted at a
 * token a byte (the body's bytes hold the documents'), and Cohere's search units of those pairs in chunks of
 * {@link RERANK_CHUNK_TOKENS}, 100 chunks a unit. Worked out only for a count above the body's bytes, or above one unit
 * per 100 documents.
 */
export function rerankAtMost(log: FastifyBaseLogger, provider: string, bodyBytes: number, sent: RerankRequest, result: RerankResult): RerankResult {
  const docs = sent.documents.length;
  const reported = result.inputTokens ?? 0;
  if (bodyBytes === 0 || (reported <= bodyBytes && result.searchUnits <= Math.ceil(docs / 100))) return result;
  const tokens = docs * (Buffer.byteLength(sent.query) + TEXT_TEMPLATE_TOKENS) + bodyBytes;
  // Each pair counts once a chunk begun: at most its tokens over the chunk, plus one.
  const searchUnits = Math.ceil((Math.ceil(tokens / RERANK_CHUNK_TOKENS) + docs) / 100);
  if (reported <= tokens && result.searchUnits <= searchUnits) return result;
  return {
    ...result,
    inputTokens: result.inputTokens === null ? null : countAtMost(log, provider, 'rerank tokens', reported, tokens),
    searchUnits: countAtMost(log, provider, 'search units', result.searchUnits, searchUnits),
  };
}

/**
 * A transcription's reported seconds and tokens, each at most what its upload could hold: `worstSeconds` (the most
 * seconds the file can hold, its budget hold's) rounded up to a whole minute, as a provider may bill by the minute;
 * audio tokens at {@link AUDIO_TOKENS_PER_SECOND} a second (the most any host counts) with the prompt's and keywords'
 * bytes and a template; transcript tokens at as many a second (Whisper writes at most 15) and a template.
 */
export function transcriptionAtMost(
  log: FastifyBaseLogger,
  provider: string,
  worstSeconds: number,
  texts: { prompt?: string | undefined; keywords?: string[] | undefined },
  t: Transcription,
): Transcription {
  // Cheap first: the text's bound is worked out only for an input count above the audio's own.
  if (transcriptionWithin(worstSeconds, t)) return t;
  const seconds = Math.ceil(worstSeconds / 60) * 60;
  const output = seconds * AUDIO_TOKENS_PER_SECOND + PROMPT_TEMPLATE_TOKENS;
  let input = output;
  // Three bytes at most a UTF-16 unit.
  for (const text of [texts.prompt ?? '', ...(texts.keywords ?? [])]) input += text.length * 3 + MESSAGE_TEMPLATE_TOKENS;
  return {
    ...t,
    billedSeconds: countAtMost(log, provider, 'audio seconds', t.billedSeconds, seconds),
    tokens:
      t.tokens === null
        ? null
        : {
            input: countAtMost(log, provider, 'audio input tokens', t.tokens.input, input),
            output: countAtMost(log, provider, 'transcript tokens', t.tokens.output, output),
          },
  };
}

/** Whether a transcription's seconds and tokens are within what `worstSeconds` of audio bills, without its prompt's share. */
export function transcriptionWithin(worstSeconds: number, t: Transcription): boolean {
  const seconds = Math.ceil(worstSeconds / 60) * 60;
  const output = seconds * AUDIO_TOKENS_PER_SECOND + PROMPT_TEMPLATE_TOKENS;
  return t.billedSeconds <= seconds && (t.tokens === null || (t.tokens.input <= output && t.tokens.output <= output));
}

/** A count reported above what the request could cost: billed at `billed`. Never the key or the content. */
function warnAbove(log: FastifyBaseLogger, provider: string, what: string, reported: number, billed: number): void {
  log.warn({ provider, reported, billed }, `${what} reported above what the request could cost: billed at that bound`);
}
