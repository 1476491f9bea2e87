/**
 * What the media parts of a chat request's messages cost the provider, in
 * tokens, for the budget hold's prompt estimate (routes/chat-completions.ts):
 * a figure per image, per second of audio and per page of a document, in
 * place of the characters of their base64, which held about a token per
 * 2.3 bytes of media (a few seconds of WAV held a hundred thousand tokens).
 */
import { HEAD_BYTES } from './audio-container.js';
import { wavByteRate } from './transcript-render.js';

/** The most an image costs among the EU hosts' vision models: Pixtral's 1024 x 1024 limit in 16-pixel patches, with its row breaks. */
export const MEDIA_PART_TOKENS = 64 * 65;

/** The most a second of audio costs among the hosts that take it in a chat: Gemini's 32 (Voxtral 12.5, OpenAI's audio models 10). */
export const AUDIO_TOKENS_PER_SECOND = 32;

/** Bytes per second of the most compact audio taken for duration when the file does not say it: Opus at its lowest, 6 kbit/s. */
const MIN_AUDIO_BYTES_PER_SECOND = 750;

/** The base64 of as many bytes as an upload's head ({@link HEAD_BYTES}): enough to find a WAV's `fmt ` chunk past a `JUNK` or `bext`. */
const HEAD_BASE64_CHARS = Math.ceil(HEAD_BYTES / 3) * 4;

/** A page of a document: an image of it, as any image counts, and a dense page's text (3,000 characters). */
export const DOCUMENT_PAGE_TOKENS = MEDIA_PART_TOKENS + 1000;

export interface PromptMedia {
  /** Tokens for the media parts. */
  tokens: number;
  /** Some media came inline: their base64 must be left out of the character count ({@link withoutInlineMedia}). */
  inline: boolean;
}

type Part = {
  type?: unknown;
  image_url?: unknown;
  input_audio?: unknown;
  file?: { file_data?: unknown } | null;
  document_url?: unknown;
} | null;

/**
 * The media parts of the messages: each image (by URL or inline) counts
 * {@link MEDIA_PART_TOKENS}; inline audio (OpenAI's `input_audio: { data,
 * format }`, Mistral's `input_audio` string) its duration; an inline
 * document (OpenAI's `file: { file_data }`, Mistral's `document_url` as a
 * data URL) its pages. Audio by URL counts as an image, a document by URL
 * as a page: the provider fetches and counts what the gateway does not
 * see, and its URL's characters held a few tokens. Null when there are
 * none, so that a request without media is measured as before, with
 * nothing allocated.
 */
export function promptMedia(messages: unknown[]): PromptMedia | null {
  let media: PromptMedia | null = null;
  for (const m of messages) {
    const content = (m as { content?: unknown }).content;
    if (!Array.isArray(content)) continue;
    for (const part of content as Part[]) {
      const type = part?.type;
      if (type === 'image_url') {
        media ??= { tokens: 0, inline: false };
        media.tokens += MEDIA_PART_TOKENS;
        const image = part?.image_url;
        const url = typeof image === 'string' ? image : (image as { url?: unknown } | null | undefined)?.url;
        if (typeof url === 'string' && url.startsWith('data:')) media.inline = true;
      } else if (type === 'input_audio') {
        const audio = part?.input_audio;
        const data = typeof audio === 'string' ? audio : (audio as { data?: unknown } | null)?.data;
        if (typeof data !== 'string') continue;
        media ??= { tokens: 0, inline: false };
        if (isRemote(data)) {
          media.tokens += MEDIA_PART_TOKENS;
          continue;
        }
        media.tokens += Math.ceil(audioSeconds(base64Of(data))) * AUDIO_TOKENS_PER_SECOND;
        media.inline = true;
      } else if (type === 'file' || type === 'document_url') {
        const data = type === 'file' ? part?.file?.file_data : part?.document_url;
        if (typeof data !== 'string') continue;
        media ??= { tokens: 0, inline: false };
        if (isRemote(data)) {
          media.tokens += DOCUMENT_PAGE_TOKENS;
          continue;
        }
        media.tokens += documentTokens(base64Of(data));
        media.inline = true;
      }
    }
  }
  return media;
}

/**
 * A JSON.stringify replacer that leaves inline media out of the messages'
 * characters ({@link promptMedia} counts them): an image's data URL
 * (OpenAI's `image_url: { url }`, Mistral's `image_url` string), audio
 * (`input_audio`, an object or a string) and a document (`file_data`,
 * `document_url`) given inline.
 */
export function withoutInlineMedia(key: string, value: unknown): unknown {
  switch (key) {
    case 'url':
    case 'image_url':
    case 'document_url':
      return typeof value === 'string' && value.startsWith('data:') ? '' : value;
    case 'file_data':
      return typeof value === 'string' && !isRemote(value) ? '' : value;
    case 'input_audio':
      if (typeof value === 'string') return isRemote(value) ? value : '';
      return value !== null && typeof value === 'object' && typeof (value as { data?: unknown }).data === 'string' ? '' : value;
    default:
      return value;
  }
}

function isRemote(s: string): boolean {
  return s.startsWith('http://') || s.startsWith('https://');
}

/** The base64 of a data URL, or the string itself (raw base64). */
function base64Of(s: string): string {
  return s.startsWith('data:') ? s.slice(s.indexOf(',') + 1) : s;
}

function decodedBytes(b64: string): number {
  return Math.floor((b64.length * 3) / 4);
}

/**
 * A WAV file's duration from its header's byte rate (OpenAI's audio
 * examples, and any recording saved as is, are PCM WAV: 32 to 176 KB a
 * second); any other audio at the most compact rate a codec has, so that
 * its duration is never underestimated.
 */
function audioSeconds(b64: string): number {
  const bytes = decodedBytes(b64);
  // As much of the file's start as an upload's is read for it, never the whole file: the `fmt ` chunk may come after others.
  const byteRate = b64.startsWith('UklGR') ? wavByteRate(Buffer.from(b64.slice(0, HEAD_BASE64_CHARS), 'base64')) : null;
  return bytes / (byteRate !== null && byteRate >= MIN_AUDIO_BYTES_PER_SECOND ? byteRate : MIN_AUDIO_BYTES_PER_SECOND);
}

/**
 * A PDF's pages, counted from its page objects (or its page tree's
 * `/Count`) at {@link DOCUMENT_PAGE_TOKENS} each. A document that keeps
 * them compressed (object streams) or is no PDF is counted by its
 * characters as text, as before: more than its pages cost for a scan, in
 * the same order for a text document.
 */
function documentTokens(b64: string): number {
  const pdf = Buffer.from(b64, 'base64').toString('latin1');
  let pages = 0;
  for (const _ of pdf.matchAll(/\/Type\s*\/Page(?![A-Za-z])/g)) pages++;
  if (pages === 0) for (const m of pdf.matchAll(/\/Count\s+(\d+)/g)) pages = Math.max(pages, Number(m[1]));
  return pages > 0 ? pages * DOCUMENT_PAGE_TOKENS : Math.ceil(b64.length / 3);
}
