/**
 * Simulated transcription: duration from the upload (a WAV header, a compressed container's own duration, else
 * 16 kHz 16-bit mono PCM), fixed text.
 */

import { flacSeconds, isWave, mp3Seconds, mp4Seconds, mpegFramesAt, oggSeconds, pastId3, pastZeros, webmSeconds } from '@gw/schema';

/**
 * Whether the bytes open an audio container a provider's decoder (ffmpeg) reads: RIFF/WAVE (RF64, BW64), an ID3 tag
 * or an MPEG audio frame (also past leading zero bytes), FLAC, Ogg, MP4/M4A (`ftyp`), WebM (EBML). Real providers
 * refuse anything else with a 400.
 */
export function isAudio(data: Buffer): boolean {
  const at = (from: number, to: number) => data.toString('latin1', from, to);
  if (isWave(data)) return true;
  if (at(0, 3) === 'ID3' || at(0, 4) === 'fLaC' || at(0, 4) === 'OggS' || at(4, 8) === 'ftyp') return true;
  if (data.length >= 4 && data.readUInt32BE(0) === 0x1a45dfa3) return true;
  return mpegFrame(data) || zeroPadded(data);
}

/** An ID3 tag or MP3 frames after the zero bytes the file opens with (a decoder looks for their sync past them). */
function zeroPadded(data: Buffer): boolean {
  const at = pastZeros(data);
  return at > 0 && (data.toString('latin1', at, at + 3) === 'ID3' || mpegFramesAt(data, at));
}

/** 11 sync bits, then no reserved version, layer, bitrate or sample rate. */
function mpegFrame(data: Buffer): boolean {
  if (data.length < 4 || data[0] !== 0xff) return false;
  const b1 = data[1] as number;
  const b2 = data[2] as number;
  return (b1 & 0xe0) === 0xe0 && ((b1 >> 3) & 3) !== 1 && ((b1 >> 1) & 3) !== 0 && b2 >> 4 !== 15 && ((b2 >> 2) & 3) !== 3;
}

/** Seconds of audio: from a RIFF/WAVE header, or a compressed container's duration, else bytes / 32000. */
export function audioSeconds(data: Buffer): number {
  if (isWave(data)) {
    let byteRate = 0;
    let pos = 12;
    while (pos + 8 <= data.length) {
      const id = data.toString('ascii', pos, pos + 4);
      const size = data.readUInt32LE(pos + 4);
      if (id === 'fmt ' && pos + 16 <= data.length) byteRate = data.readUInt32LE(pos + 16);
      if (id === 'data' && byteRate > 0) return Math.min(ds64Size(data, size), data.length - pos - 8) / byteRate;
      pos += 8 + size + (size % 2);
    }
  }
  return compressedSeconds(data) ?? data.length / 32_000;
}

/** RF64's `data` states 0xFFFFFFFF, its size in the `ds64` chunk that comes first (a streamed RIFF's runs to the end). */
function ds64Size(data: Buffer, size: number): number {
  return size === 0xffffffff && data.toString('ascii', 12, 16) === 'ds64' && data.length >= 36 ? Number(data.readBigUInt64LE(28)) : size;
}

/** A compressed container's own duration, as a provider's decoder reads it (null: not one, or it does not say). */
function compressedSeconds(data: Buffer): number | null {
  const head = data.toString('latin1', 0, 4);
  if (head === 'fLaC' || data.toString('latin1', pastId3(data), pastId3(data) + 4) === 'fLaC') return flacSeconds(data);
  if (head === 'OggS') return oggSeconds(data);
  if (data.toString('latin1', 4, 8) === 'ftyp') return mp4Seconds(data);
  if (data.length >= 4 && data.readUInt32BE(0) === 0x1a45dfa3) return webmSeconds(data);
  return head.startsWith('ID3') || mpegFrame(data) || zeroPadded(data) ? mp3Seconds(data) : null;
}

export interface Word {
  word: string;
  start: number;
  end: number;
}

export interface Segment {
  start: number;
  end: number;
  text: string;
  words: Word[];
}

export interface Transcript {
  duration: number;
  text: string;
  words: Word[];
  segments: Segment[];
}

const r2 = (x: number): number => Math.round(x * 100) / 100;

/** "Simulated transcript of N.N seconds of audio." with evenly spread word timings, one segment per 30 s. */
export function transcribe(data: Buffer): Transcript {
  const duration = Math.round(audioSeconds(data) * 100) / 100;
  const text = `Simulated transcript of ${duration.toFixed(1)} seconds of audio.`;
  const tokens = text.split(' ');
  const step = duration / tokens.length;
  const words = tokens.map((w, i) => ({ word: w, start: r2(i * step), end: r2((i + 1) * step) }));
  const nSeg = Math.max(1, Math.min(tokens.length, Math.ceil(duration / 30)));
  const per = Math.ceil(words.length / nSeg);
  const segments: Segment[] = [];
  for (let i = 0; i < words.length; i += per) {
    const ws = words.slice(i, i + per);
    segments.push({ start: ws[0]?.start ?? 0, end: ws[ws.length - 1]?.end ?? 0, text: ws.map((w) => w.word).join(' '), words: ws });
  }
  return { duration, text, words, segments };
}

function stamp(t: number, sep: string): string {
  const ms = Math.round(t * 1000);
  const h = Math.floor(ms / 3_600_000);
  const m = Math.floor((ms % 3_600_000) / 60_000);
  const s = Math.floor((ms % 60_000) / 1000);
  const pad = (n: number, w = 2): string => String(n).padStart(w, '0');
  return `${pad(h)}:${pad(m)}:${pad(s)}${sep}${pad(ms % 1000, 3)}`;
}

export function toSrt(t: Transcript): string {
  return t.segments.map((s, i) => `${i + 1}\n${stamp(s.start, ',')} --> ${stamp(s.end, ',')}\n${s.text}\n`).join('\n');
}

export function toVtt(t: Transcript): string {
  return `WEBVTT\n\n${t.segments.map((s) => `${stamp(s.start, '.')} --> ${stamp(s.end, '.')}\n${s.text}\n`).join('\n')}`;
}
