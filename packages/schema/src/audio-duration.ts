/**
 * Seconds of audio as a provider's decoder (ffmpeg) tells them from the container, so that a compressed upload is
 * timed (and billed) as a real provider times it, not as raw PCM: by the simulated providers, and by the gateway
 * when a provider tells no length. Null when the container does not say.
 */

/** MP3 (past any zero padding and ID3v2 tags): a Xing/Info or VBRI header's frame count, else the frames walked, the bytes past them at their bit rate. */
export function mp3Seconds(data: Buffer): number | null {
  let at = firstFrame(data, pastId3(data, pastZeros(data)));
  const first = frameAt(data, at);
  if (!first) return null;
  const counted = vbrFrames(data, at, first);
  if (counted !== null) return (counted * first.samples) / first.rate;
  let seconds = 0;
  let bytes = 0;
  let frame: Frame | null = first;
  while (frame) {
    seconds += frame.samples / frame.rate;
    bytes += frame.length;
    at += frame.length;
    frame = frameAt(data, at);
  }
  // Bytes past the last frame (a tag, damage): timed at the walked frames' rate, as ffmpeg estimates.
  const rest = Math.max(0, data.length - at);
  return rest > 128 && bytes > 0 ? seconds + (rest * seconds) / bytes : seconds;
}

/**
 * Where the bytes past a file's ID3v2 tags begin (0 for none): a syncsafe size after a 10-byte header, 10 more with a
 * footer; a file tagged again may carry two. Taggers put them before FLAC too, where decoders skip them alike.
 */
export function pastId3(data: Buffer, from = 0): number {
  let at = from;
  while (data.toString('latin1', at, at + 3) === 'ID3' && at + 10 <= data.length) {
    const tag = at;
    at += 10 + (((data[tag + 6] as number) << 21) | ((data[tag + 7] as number) << 14) | ((data[tag + 8] as number) << 7) | (data[tag + 9] as number));
    if (((data[tag + 5] as number) & 0x10) !== 0) at += 10;
  }
  return at;
}

/** Where the zero bytes some recorders and tools write before an MP3's tag or first frame end (0 for none). */
export function pastZeros(data: Buffer): number {
  let at = 0;
  while (at < data.length && data[at] === 0) at++;
  return at;
}

/**
 * Whether RIFF/WAVE opens the bytes, or its 64-bit forms RF64 (EBU 3306) and BW64 (ITU-R BS.2088), which broadcast
 * and field recorders and `ffmpeg -rf64` write, their sizes in a `ds64` chunk.
 */
export function isWave(data: Buffer): boolean {
  if (data.length < 12 || data.toString('latin1', 8, 12) !== 'WAVE') return false;
  const id = data.toString('latin1', 0, 4);
  return id === 'RIFF' || id === 'RF64' || id === 'BW64';
}

/**
 * Whether an MP3's frames begin at `at`: a frame header that another follows, or whose next would lie past the bytes
 * at hand. One header alone is two bytes any file may hold.
 */
export function mpegFramesAt(data: Buffer, at: number): boolean {
  const frame = frameAt(data, at);
  return frame !== null && (at + frame.length + 4 > data.length || frameAt(data, at + frame.length) !== null);
}

/** Bytes looked through for the first frame past the tags. */
const RESYNC_BYTES = 64 * 1024;

/**
 * Where the first frame begins at or past `at`: bytes between a tag and the audio (padding a tagger left out of the
 * tag's size, a tag's remains) are skipped as a decoder resyncs, on a frame header that another follows or that
 * ends the file. `at` when there is none.
 */
function firstFrame(data: Buffer, at: number): number {
  const end = Math.min(data.length - 4, at + RESYNC_BYTES);
  for (let i = at; i <= end; i++) {
    if (data[i] === 0xff && mpegFramesAt(data, i)) return i;
  }
  return at;
}

interface Frame {
  length: number;
  samples: number;
  rate: number;
  mono: boolean;
  version: number;
}

const BITRATES: Record<string, number[]> = {
  '1-1': [0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448],
  '1-2': [0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384],
  '1-3': [0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320],
  '2-1': [0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256],
  '2-2': [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160],
};
const RATES = [44_100, 48_000, 32_000];

function frameAt(data: Buffer, at: number): Frame | null {
  if (at + 4 > data.length || data[at] !== 0xff) return null;
  const b1 = data[at + 1] as number;
  const b2 = data[at + 2] as number;
  if ((b1 & 0xe0) !== 0xe0) return null;
  const v = (b1 >> 3) & 3; // 3: MPEG-1, 2: MPEG-2, 0: MPEG-2.5
  const layer = 4 - ((b1 >> 1) & 3);
  const bi = b2 >> 4;
  const ri = (b2 >> 2) & 3;
  if (v === 1 || layer === 4 || bi === 0 || bi === 15 || ri === 3) return null;
  const version = v === 3 ? 1 : 2;
  const kbps = BITRATES[`${version}-${version === 1 ? layer : layer === 1 ? 1 : 2}`]?.[bi] ?? 0;
  const rate = (RATES[ri] as number) / (v === 3 ? 1 : v === 2 ? 2 : 4);
  const pad = (b2 >> 1) & 1;
  const samples = layer === 1 ? 384 : layer === 3 && version === 2 ? 576 : 1152;
  const length = layer === 1 ? (Math.floor((12_000 * kbps) / rate) + pad) * 4 : Math.floor(((samples / 8) * 1000 * kbps) / rate) + pad;
  const mono = (data[at + 3] as number) >> 6 === 3;
  return length > 4 ? { length, samples, rate, mono, version } : null;
}

/** The frame count of a Xing/Info header (after the side information) or a VBRI one (32 bytes in) in the first frame. */
function vbrFrames(data: Buffer, at: number, f: Frame): number | null {
  const side = f.version === 1 ? (f.mono ? 17 : 32) : f.mono ? 9 : 17;
  const xing = at + 4 + side;
  const tag = data.toString('latin1', xing, xing + 4);
  if ((tag === 'Xing' || tag === 'Info') && xing + 12 <= data.length && ((data[xing + 7] as number) & 1) === 1) return data.readUInt32BE(xing + 8);
  const vbri = at + 36;
  if (data.toString('latin1', vbri, vbri + 4) === 'VBRI' && vbri + 18 <= data.length) return data.readUInt32BE(vbri + 14);
  return null;
}

/** FLAC: STREAMINFO's total samples over its sample rate (null when the encoder left the count at 0, as a stream may). */
export function flacSeconds(data: Buffer): number | null {
  // STREAMINFO follows `fLaC` (past any ID3v2 tag put first) and its 4-byte block header.
  const at = pastId3(data) + 8;
  if (data.length < at + 18) return null;
  const rate = ((data[at + 10] as number) << 12) | ((data[at + 11] as number) << 4) | ((data[at + 12] as number) >> 4);
  const total = ((data[at + 13] as number) & 0x0f) * 2 ** 32 + data.readUInt32BE(at + 14);
  return rate > 0 && total > 0 ? total / rate : null;
}

/** Ogg (Opus, Vorbis): the last page's granule position over the rate, less Opus's pre-skip. */
export function oggSeconds(data: Buffer): number | null {
  const packet = 27 + (data[26] ?? 0);
  let rate: number;
  let skip = 0;
  if (data.toString('latin1', packet, packet + 8) === 'OpusHead') {
    rate = 48_000;
    skip = data.readUInt16LE(packet + 10);
  } else if (data.toString('latin1', packet + 1, packet + 7) === 'vorbis' && packet + 16 <= data.length) {
    rate = data.readUInt32LE(packet + 12);
  } else return null;
  const last = data.lastIndexOf('OggS', data.length - 27, 'latin1');
  if (last < 0 || rate === 0) return null;
  const granule = Number(data.readBigInt64LE(last + 6));
  return granule > skip ? (granule - skip) / rate : null;
}

/**
 * MP4/M4A: the movie header's (`mvhd`) duration over its timescale; a fragmented file's (Safari's and iOS's
 * MediaRecorder, `-movflags frag_keyframe`), whose `mvhd` says 0, its `mehd` fragment duration, else its first
 * track's samples summed over its fragments (`trun`) at its media timescale.
 */
export function mp4Seconds(data: Buffer): number | null {
  const at = data.indexOf('mvhd', 0, 'latin1');
  if (at < 0 || at + 32 > data.length) return null;
  const v1 = data[at + 4] === 1;
  const scale = data.readUInt32BE(at + (v1 ? 24 : 16));
  const duration = v1 ? Number(data.readBigUInt64BE(at + 28)) : data.readUInt32BE(at + 20);
  if (scale > 0 && duration > 0) return duration / scale;
  const mehd = data.indexOf('mehd', at, 'latin1');
  const fragments = mehd > 0 && mehd + 16 <= data.length ? (data[mehd + 4] === 1 ? Number(data.readBigUInt64BE(mehd + 8)) : data.readUInt32BE(mehd + 8)) : 0;
  if (scale > 0 && fragments > 0) return fragments / scale;
  return fragmentSeconds(data, at);
}

/** The first track's samples in a fragmented MP4's `moof` boxes, over its `mdhd` timescale (null when none). */
function fragmentSeconds(data: Buffer, mvhd: number): number | null {
  const tkhd = data.indexOf('tkhd', mvhd, 'latin1');
  const mdhd = data.indexOf('mdhd', mvhd, 'latin1');
  const trex = data.indexOf('trex', mvhd, 'latin1');
  if (tkhd < 0 || mdhd < 0 || mdhd + 28 > data.length || tkhd + 28 > data.length) return null;
  const track = data.readUInt32BE(tkhd + (data[tkhd + 4] === 1 ? 24 : 16));
  const scale = data.readUInt32BE(mdhd + (data[mdhd + 4] === 1 ? 24 : 16));
  const fallback = trex > 0 && trex + 20 <= data.length ? data.readUInt32BE(trex + 16) : 0;
  let ticks = 0;
  // Top-level boxes by their sizes (a `moof` in the audio's bytes is no box), each `moof`'s `traf`s within.
  for (const moof of boxes(data, 0, data.length)) {
    if (moof.type !== 'moof') continue;
    for (const traf of boxes(data, moof.body, moof.end)) {
      if (traf.type !== 'traf') continue;
      let defaultDuration = fallback;
      let mine = false;
      for (const box of boxes(data, traf.body, traf.end)) {
        if (box.type === 'tfhd' && box.body + 8 <= box.end) {
          const flags = data.readUInt32BE(box.body) & 0xffffff;
          mine = data.readUInt32BE(box.body + 4) === track;
          const at = box.body + 8 + (flags & 1 ? 8 : 0) + (flags & 2 ? 4 : 0);
          if (flags & 8 && at + 4 <= box.end) defaultDuration = data.readUInt32BE(at);
        } else if (box.type === 'trun' && mine && box.body + 8 <= box.end) {
          const flags = data.readUInt32BE(box.body) & 0xffffff;
          const count = data.readUInt32BE(box.body + 4);
          if (!(flags & 0x100)) ticks += count * defaultDuration;
          else {
            // Each sample's fields: duration, size, flags, composition offset, as its flags say.
            const stride = 4 * [0x100, 0x200, 0x400, 0x800].filter((f) => flags & f).length;
            let at = box.body + 8 + (flags & 1 ? 4 : 0) + (flags & 4 ? 4 : 0);
            for (let i = 0; i < count && at + 4 <= box.end; i++, at += stride) ticks += data.readUInt32BE(at);
          }
        }
      }
    }
  }
  return scale > 0 && ticks > 0 ? ticks / scale : null;
}

/** The boxes from `start` to `end`: type, body start and end (a size of 1 is a 64-bit one, 0 runs to `end`). */
function* boxes(data: Buffer, start: number, end: number): Generator<{ type: string; body: number; end: number }> {
  let at = start;
  while (at + 8 <= end) {
    const size32 = data.readUInt32BE(at);
    const large = size32 === 1 && at + 16 <= end;
    const size = size32 === 0 ? end - at : large ? Number(data.readBigUInt64BE(at + 8)) : size32;
    if (size < 8) return;
    yield { type: data.toString('latin1', at + 4, at + 8), body: at + (large ? 16 : 8), end: Math.min(end, at + size) };
    at += size;
  }
}

/**
 * WebM: the segment's Duration, else (a browser's MediaRecorder writes none) the last cluster's timecode plus its
 * last block's, in TimecodeScale units (1 ms unless stated).
 */
export function webmSeconds(data: Buffer): number | null {
  const CLUSTER = Buffer.from([0x1f, 0x43, 0xb6, 0x75]);
  // The segment's Info comes before the first cluster: looked for there only, not in the audio.
  const firstCluster = data.indexOf(CLUSTER);
  const header = data.subarray(0, firstCluster < 0 ? data.length : firstCluster);
  const scaleAt = header.indexOf(Buffer.from([0x2a, 0xd7, 0xb1]));
  const scale = (scaleAt >= 0 ? element(header, scaleAt + 3) : null)?.uint ?? 1_000_000;
  const durAt = header.indexOf(Buffer.from([0x44, 0x89]));
  const duration = durAt >= 0 ? element(header, durAt + 2) : null;
  if (duration?.float) return (duration.float * scale) / 1e9;
  const cluster = data.lastIndexOf(CLUSTER);
  if (cluster < 0) return null;
  // The cluster's children: its Timecode (E7), then SimpleBlocks (A3) or BlockGroups (A0) holding a Block (A1).
  const size = vint(data, cluster + 4);
  if (!size) return null;
  let at = cluster + 4 + size.length;
  let base: number | null = null;
  let last = 0;
  while (at < data.length) {
    const id = data[at] as number;
    const el = element(data, at + 1);
    if (!el) break;
    if (id === 0xe7) base = el.uint;
    else if (id === 0xa3) last = blockTime(data, el.start) ?? last;
    else if (id === 0xa0 && data[el.start] === 0xa1) last = blockTime(data, el.start + 1 + (vint(data, el.start + 1)?.length ?? 0)) ?? last;
    else if (id !== 0xa7 && id !== 0xab && id !== 0xfb) break;
    at = el.start + el.size;
  }
  return base === null ? null : ((base + Math.max(0, last)) * scale) / 1e9;
}

/** A block's timecode, relative to its cluster's: an int16 after its track number. */
function blockTime(data: Buffer, at: number): number | null {
  const track = vint(data, at);
  return track && at + track.length + 2 <= data.length ? data.readInt16BE(at + track.length) : null;
}

/** An EBML element's body from its size at `at`: where it starts, its size, and read as an unsigned int or a float. */
function element(data: Buffer, at: number): { start: number; size: number; uint: number | null; float: number | null } | null {
  const size = vint(data, at);
  if (!size) return null;
  const start = at + size.length;
  const n = size.value;
  const fits = start + n <= data.length;
  return {
    start,
    size: n,
    uint: fits && n > 0 && n <= 6 ? data.readUIntBE(start, n) : null,
    float: fits && n === 4 ? data.readFloatBE(start) : fits && n === 8 ? data.readDoubleBE(start) : null,
  };
}

/** An EBML variable-length size (its marker bit removed). */
function vint(data: Buffer, at: number): { length: number; value: number } | null {
  const first = data[at];
  if (first === undefined || first === 0) return null;
  let length = 1;
  while ((first & (0x80 >> (length - 1))) === 0) length++;
  if (at + length > data.length) return null;
  let value = first & (0xff >> length);
  for (let i = 1; i < length; i++) value = value * 256 + (data[at + i] as number);
  return { length, value };
}
