import { type FileHandle, open, readFile } from 'node:fs/promises';
import { extname } from 'node:path';
import { flacSeconds, isWave, mp3Seconds, mp4Seconds, mpegFramesAt, oggSeconds, pastId3, pastZeros, webmSeconds } from '@gw/schema';

/** The extensions OpenAI's API takes for a transcription's file, named in the refusal of one that is no audio. */
export const AUDIO_EXTENSIONS = ['flac', 'm4a', 'mp3', 'mp4', 'mpeg', 'mpga', 'oga', 'ogg', 'wav', 'webm'] as const;

export type AudioContainer = 'wav' | 'mp3' | 'flac' | 'ogg' | 'mp4' | 'webm';

/**
 * Enough of a file's start to tell its container and read a WAV header's `fmt ` chunk, also past the chunks some
 * writers put before it (a `JUNK` of 28 bytes or more, a broadcast WAV's `bext` of 602 and more).
 */
export const HEAD_BYTES = 4096;

/**
 * The audio container a file's first bytes open (null for none known):
 * RIFF/WAVE (and its 64-bit RF64/BW64), MP3 (an ID3 tag or an MPEG audio
 * frame header, also past zero bytes some recorders write first), FLAC
 * (also after an ID3 tag), Ogg, MP4/M4A (`ftyp` box) and WebM/Matroska
 * (EBML). Told by content, not by name: the official SDKs send bytes as
 * `upload` or `unknown_file` with no extension, and a name says nothing
 * of what the bytes are.
 */
export function audioContainer(head: Buffer): AudioContainer | null {
  const ascii = (from: number, to: number) => head.toString('latin1', from, to);
  if (isWave(head)) return 'wav';
  if (ascii(0, 3) === 'ID3') {
    const at = pastId3(head);
    return ascii(at, at + 4) === 'fLaC' ? 'flac' : 'mp3';
  }
  if (mpegFrame(head)) return 'mp3';
  if (ascii(0, 4) === 'fLaC') return 'flac';
  if (ascii(0, 4) === 'OggS') return 'ogg';
  if (head.length >= 12 && ascii(4, 8) === 'ftyp' && !IMAGE_BRANDS.has(ascii(8, 12))) return 'mp4';
  if (head.length >= 4 && head.readUInt32BE(0) === 0x1a45dfa3) return 'webm';
  return head[0] === 0 && afterZeros(head) ? 'mp3' : null;
}

/**
 * Whether an ID3 tag or MP3 frames follow the zero bytes a file opens with (within `head`): padding some recorders
 * and tools write first, which decoders skip as they look for the tag or frame sync. Zeros alone, or zeros before
 * anything else, are no audio.
 */
function afterZeros(head: Buffer): boolean {
  const at = pastZeros(head);
  return head.toString('latin1', at, at + 3) === 'ID3' || mpegFramesAt(head, at);
}

/**
 * The major brands of ISO media files that are pictures, not audio or video (HEIF/HEIC photos, AVIF, JPEG XL): an
 * `ftyp` box opens them too, and a phone's photo sent by mistake would otherwise reach a provider as MP4.
 */
const IMAGE_BRANDS = new Set(['heic', 'heix', 'heim', 'heis', 'hevc', 'hevx', 'hevm', 'hevs', 'mif1', 'msf1', 'avif', 'avis', 'avio', 'jxl ']);

/** An MPEG audio frame header: 11 sync bits, then a version, layer, bitrate and sample rate that are not the reserved values. */
function mpegFrame(head: Buffer): boolean {
  if (head.length < 4 || head[0] !== 0xff) return false;
  const b1 = head[1] as number;
  const b2 = head[2] as number;
  if ((b1 & 0xe0) !== 0xe0) return false;
  const version = (b1 >> 3) & 3;
  const layer = (b1 >> 1) & 3;
  const bitrate = b2 >> 4;
  const sampleRate = (b2 >> 2) & 3;
  return version !== 1 && layer !== 0 && bitrate !== 15 && sampleRate !== 3;
}

/** How each compressed container tells its length, read as a provider's decoder reads it. */
const CONTAINER_SECONDS: Record<Exclude<AudioContainer, 'wav'>, (data: Buffer) => number | null> = {
  mp3: mp3Seconds,
  flac: flacSeconds,
  ogg: oggSeconds,
  mp4: mp4Seconds,
  webm: webmSeconds,
};

/**
 * A compressed upload's seconds as its container tells them (an MP4's `mvhd` may be last, an Ogg's length is its last
 * page's, an MP3's its frames), read whole. Null for a WAV (timed by its header), a container that does not say, or a
 * spool already removed (its client left): the caller then falls back to its own estimate.
 */
export async function containerSeconds(path: string, container: AudioContainer): Promise<number | null> {
  if (container === 'wav') return null;
  try {
    const data = await readFile(path);
    return plausibleSeconds(CONTAINER_SECONDS[container](data), data.length);
  } catch {
    return null;
  }
}

/**
 * A compressed upload's seconds as far as its first bytes and last {@link TAIL_BYTES} tell them (FLAC's STREAMINFO,
 * a WebM's Duration or last cluster, an Ogg's last page, an MP4's `mvhd` first or near the end, an MP3's Xing count),
 * for its hold: a quiet recording or one coded below the lowest speech rate holds more seconds than its bytes at that
 * rate. Null when they tell none, or the spool is gone.
 */
export async function toldSeconds(path: string, head: Buffer, size: number, container: AudioContainer): Promise<number | null> {
  if (container === 'wav') return null;
  try {
    let data = head;
    // Those whose length is told at their end: read with their start, which says what the end's numbers mean.
    if (size > head.length && (container === 'ogg' || container === 'webm' || container === 'mp4')) {
      const tail = Buffer.alloc(Math.min(size - head.length, TAIL_BYTES));
      const handle = await open(path, 'r');
      try {
        await handle.read(tail, 0, tail.length, size - tail.length);
      } finally {
        await handle.close();
      }
      data = Buffer.concat([head, tail]);
    }
    return plausibleSeconds(CONTAINER_SECONDS[container](data), size);
  } catch {
    return null;
  }
}

/**
 * Fewer bytes a second than any codec writes, silence included (Opus at its lowest, 0.5 kbit/s, is 62.5; FLAC, AAC
 * and Vorbis of silence 94-190): a length its file's bytes cannot hold at this rate is a header that lies.
 */
const LEAST_BYTES_PER_SECOND = 10;

/**
 * A container's length as the hold and the bill may take it: none for no positive number (a WebM's Duration may be
 * any float), and at most its bytes at {@link LEAST_BYTES_PER_SECOND}, so a stated Infinity or 10^300 seconds neither
 * holds a budget for good nor reaches a usage record, whose cost must be a finite number.
 */
function plausibleSeconds(seconds: number | null, size: number): number | null {
  if (seconds === null || !(seconds > 0)) return null;
  return Math.min(seconds, size / LEAST_BYTES_PER_SECOND);
}

/** An Ogg page's most bytes (65,307), and so where its last granule is found: a WebM's last cluster, an `mvhd` written last, are most often within. */
const TAIL_BYTES = 64 * 1024;

/**
 * The first bytes of a spooled upload: {@link HEAD_BYTES}, or a WAV's whole header when its chunks before the audio
 * run past them (a field recorder's iXML or a bext's coding history of kilobytes before `fmt `), up to
 * {@link MAX_WAV_HEADER}, so that its byte rate and audio are read as for any WAV; or, for a file that opens with
 * more zero bytes than those, up to {@link MAX_ZERO_PADDING}, so that the MP3 they pad is told.
 */
export async function readHead(path: string, size: number): Promise<Buffer> {
  const handle = await open(path, 'r');
  try {
    let head = Buffer.alloc(Math.min(size, HEAD_BYTES));
    await handle.read(head, 0, head.length, 0);
    if (head.length < size && pastZeros(head) + 16 > head.length) {
      head = Buffer.alloc(Math.min(size, MAX_ZERO_PADDING));
      await handle.read(head, 0, head.length, 0);
      return head;
    }
    const end = await wavAudioStart(handle, head, size);
    if (end === null || end <= head.length || end > MAX_WAV_HEADER) return head;
    const whole = Buffer.alloc(end);
    await handle.read(whole, 0, end, 0);
    return whole;
  } finally {
    await handle.close();
  }
}

/** The most zero bytes looked past for an MP3's tag or first frame: read only for a file opening with more than {@link HEAD_BYTES} of them. */
const MAX_ZERO_PADDING = 64 * 1024;
/** The longest WAV header read whole; one longer is held at the lowest speech byte rate, as a file of no known rate. */
const MAX_WAV_HEADER = 1024 * 1024;
/** Chunks walked looking for `data`: writers put a handful before it. */
const MAX_WAV_CHUNKS = 64;

/** Where a RIFF/WAVE file's audio begins (past its `data` chunk's header), its chunks' headers read from the file past `head`. */
async function wavAudioStart(handle: FileHandle, head: Buffer, size: number): Promise<number | null> {
  if (!isWave(head)) return null;
  // Read from the file only past `head`: a common WAV's header is all within it.
  let read: Buffer | null = null;
  let at = 12;
  for (let i = 0; i < MAX_WAV_CHUNKS && at + 8 <= size && at <= MAX_WAV_HEADER; i++) {
    let from = at;
    let bytes = head;
    if (at + 8 > head.length) {
      read ??= Buffer.alloc(8);
      await handle.read(read, 0, 8, at);
      [bytes, from] = [read, 0];
    }
    if (bytes.toString('latin1', from, from + 4) === 'data') return at + 8;
    const n = bytes.readUInt32LE(from + 4);
    at += 8 + n + (n % 2);
  }
  return null;
}

/**
 * The file name to send a provider: the client's when it ends in an
 * extension OpenAI's API takes, else with the container's added, since
 * OpenAI and Azure tell the format by the name and refuse bytes sent
 * without one (`upload`, `blob`) or under another (`voice.bin`). A name
 * that is only such an extension (`.wav`) is a hidden file with no
 * extension to Node's extname and Python's splitext alike: it gets the
 * stem `upload` (`upload.wav`), not a second extension (`.wav.wav`).
 */
export function upstreamFilename(filename: string, container: AudioContainer): string {
  const name = leafName(filename);
  if (isAudioExtension(extname(name).slice(1))) return name;
  return name.startsWith('.') && isAudioExtension(name.slice(1)) ? `upload${name}` : `${name}.${container}`;
}

/**
 * The media type a provider is told for each container, in place of the client's: that header's value is the client's
 * own bytes (quotes, control characters, up to a part header's 16 KB, a type the file name sent contradicts).
 */
export const CONTAINER_TYPES: Readonly<Record<AudioContainer, string>> = {
  wav: 'audio/wav',
  mp3: 'audio/mpeg',
  flac: 'audio/flac',
  ogg: 'audio/ogg',
  mp4: 'audio/mp4',
  webm: 'audio/webm',
};

function isAudioExtension(ext: string): boolean {
  return (AUDIO_EXTENSIONS as readonly string[]).includes(ext.toLowerCase());
}

/** Longest file name sent on, in UTF-16 units: file systems take 255 bytes, and a name says nothing past that. */
const MAX_NAME = 128;

/**
 * The last segment of a client's file name, without control characters, at most {@link MAX_NAME} long (its extension
 * kept): a client's folders (`C:\Users\…`, `../../`) are not the provider's business (RFC 7578 §4.2), and a NUL or
 * a name of kilobytes is no name a provider stores. Nothing left is `upload`, as a file part with no name.
 */
function leafName(filename: string): string {
  // The common name (`meeting.wav`) passes as it is.
  if (filename.length <= MAX_NAME && !UNSAFE_NAME.test(filename)) return filename;
  let name = filename
    .slice(Math.max(filename.lastIndexOf('/'), filename.lastIndexOf('\\')) + 1)
    .replace(CONTROL, '')
    .trim();
  if (name.length > MAX_NAME) {
    const ext = extname(name);
    const keep = ext.length <= 16 ? ext : '';
    let stem = name.slice(0, MAX_NAME - keep.length);
    // Not half of a character outside the BMP.
    if (/[\uD800-\uDBFF]$/.test(stem)) stem = stem.slice(0, -1);
    name = stem + keep;
  }
  return name === '' || name === '.' || name === '..' ? 'upload' : name;
}

const CONTROL = /\p{Cc}/gu;
const UNSAFE_NAME = /[/\\\p{Cc}]|^\.\.?$|^\s|\s$|^$/u;
