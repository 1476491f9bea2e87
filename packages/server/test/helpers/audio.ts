/** A 16 kHz, 16-bit mono PCM WAV of `seconds` of a quiet 440 Hz tone, made in the test. */
export function wav(seconds: number, sampleRate = 16_000): Buffer {
  const samples = Math.round(seconds * sampleRate);
  const out = Buffer.alloc(44 + samples * 2);
  out.write('RIFF', 0, 'ascii');
  out.writeUInt32LE(36 + samples * 2, 4);
  out.write('WAVEfmt ', 8, 'ascii');
  out.writeUInt32LE(16, 16);
  out.writeUInt16LE(1, 20); // PCM
  out.writeUInt16LE(1, 22); // mono
  out.writeUInt32LE(sampleRate, 24);
  out.writeUInt32LE(sampleRate * 2, 28); // byte rate
  out.writeUInt16LE(2, 32);
  out.writeUInt16LE(16, 34);
  out.write('data', 36, 'ascii');
  out.writeUInt32LE(samples * 2, 40);
  for (let i = 0; i < samples; i++) out.writeInt16LE(Math.round(3000 * Math.sin((2 * Math.PI * 440 * i) / sampleRate)), 44 + i * 2);
  return out;
}

/** A WAV with a chunk of `size` zero bytes put between its RIFF header and its `fmt ` chunk, as some writers do. */
export function withChunkBeforeFmt(file: Buffer, id: string, size: number): Buffer {
  const chunk = Buffer.alloc(8 + size + (size % 2));
  chunk.write(id, 0, 'ascii');
  chunk.writeUInt32LE(size, 4);
  const out = Buffer.concat([file.subarray(0, 12), chunk, file.subarray(12)]);
  out.writeUInt32LE(out.length - 8, 4);
  return out;
}

/**
 * Compressed uploads made in the test, as their encoders lay them out, each with `kbps` of payload a second (zeros
 * in place of the coded audio, which a duration is not read from): what a client really sends, timed by its container.
 */
const filler = (seconds: number, kbps: number) => Buffer.alloc(Math.round((seconds * kbps * 1000) / 8));

/** MP3: MPEG-1 Layer III mono frames at 44.1 kHz (1,152 samples each), 128 kbit/s, after an ID3v2 tag when `id3`. */
export function mp3(seconds: number, { id3 = false } = {}): Buffer {
  const frames = Math.round((seconds * 44_100) / 1152);
  // 128 kbit/s at 44.1 kHz: 417 bytes a frame (no padding), header FF FB 90 C4 (mono).
  const frame = Buffer.concat([Buffer.from([0xff, 0xfb, 0x90, 0xc4]), Buffer.alloc(413)]);
  const tag = Buffer.concat([Buffer.from('ID3\x04\x00\x00\x00\x00\x08\x00', 'latin1'), Buffer.alloc(1024)]);
  return Buffer.concat([...(id3 ? [tag] : []), ...Array.from({ length: frames }, () => frame)]);
}

/** An MP3 with `gap` zero bytes between its ID3v2 tag and its first frame (padding a tagger left out of the tag's size). */
export function mp3AfterGap(seconds: number, gap: number): Buffer {
  const tagged = mp3(seconds, { id3: true });
  return Buffer.concat([tagged.subarray(0, 1034), Buffer.alloc(gap), tagged.subarray(1034)]);
}

/** MP3 VBR as LAME writes it: a first frame holding a Xing header with the frame count, then frames of 64 and 160 kbit/s. */
export function mp3Vbr(seconds: number): Buffer {
  const frames = Math.round((seconds * 44_100) / 1152);
  const xing = Buffer.concat([Buffer.from([0xff, 0xfb, 0x90, 0xc4]), Buffer.alloc(413)]);
  xing.write('Xing', 4 + 17, 'latin1');
  xing.writeUInt32BE(1, 4 + 17 + 4); // flags: frame count present
  xing.writeUInt32BE(frames, 4 + 17 + 8);
  // 64 kbit/s: 208 bytes (header byte 2 0x50); 160 kbit/s: 522 bytes (0xa0).
  const low = Buffer.concat([Buffer.from([0xff, 0xfb, 0x50, 0xc4]), Buffer.alloc(204)]);
  const high = Buffer.concat([Buffer.from([0xff, 0xfb, 0xa0, 0xc4]), Buffer.alloc(518)]);
  return Buffer.concat([xing, ...Array.from({ length: frames }, (_, i) => (i % 3 === 0 ? high : low))]);
}

/** FLAC: STREAMINFO (16 kHz mono 16-bit, its total samples) and `kbps` of frames (half of the PCM, as speech compresses). */
export function flac(seconds: number, kbps = 128): Buffer {
  const info = Buffer.alloc(4 + 34);
  info.writeUInt8(0x80, 0); // last metadata block, STREAMINFO
  info.writeUIntBE(34, 1, 3);
  info.writeUInt16BE(4096, 4);
  info.writeUInt16BE(4096, 6);
  const samples = Math.round(seconds * 16_000);
  // 20 bits of rate, 3 of channels - 1, 5 of bits - 1, 36 of total samples.
  info.writeUInt32BE(((16_000 << 12) | (0 << 9) | (15 << 4) | Math.floor(samples / 2 ** 32)) >>> 0, 14);
  info.writeUInt32BE(samples % 2 ** 32, 18);
  return Buffer.concat([Buffer.from('fLaC', 'latin1'), info, filler(seconds, kbps)]);
}

/** An Ogg page: its header (granule position, serial, sequence) and one packet. */
function oggPage(granule: bigint, sequence: number, packet: Buffer, type = 0): Buffer {
  const head = Buffer.alloc(27);
  head.write('OggS', 0, 'latin1');
  head.writeUInt8(type, 5);
  head.writeBigInt64LE(granule, 6);
  head.writeUInt32LE(0x1234, 14);
  head.writeUInt32LE(sequence, 18);
  const lacing = [...Array.from({ length: Math.floor(packet.length / 255) }, () => 255), packet.length % 255];
  head.writeUInt8(lacing.length, 26);
  return Buffer.concat([head, Buffer.from(lacing), packet]);
}

/** Ogg/Opus as a browser or opusenc writes it: OpusHead (pre-skip 312), OpusTags, audio pages, the last one's granule the end. */
export function oggOpus(seconds: number, kbps = 24): Buffer {
  const head = Buffer.alloc(19);
  head.write('OpusHead', 0, 'latin1');
  head.writeUInt8(1, 8);
  head.writeUInt8(1, 9);
  head.writeUInt16LE(312, 10);
  head.writeUInt32LE(48_000, 12);
  const pages = [oggPage(0n, 0, head, 2), oggPage(0n, 1, Buffer.from('OpusTags\0\0\0\0\0\0\0\0', 'latin1'))];
  const body = filler(seconds, kbps);
  const perPage = 4000;
  const count = Math.ceil(body.length / perPage);
  for (let i = 0; i < count; i++) {
    const granule = BigInt(Math.round(((i + 1) / count) * seconds * 48_000) + 312);
    pages.push(oggPage(granule, i + 2, body.subarray(i * perPage, (i + 1) * perPage), i === count - 1 ? 4 : 0));
  }
  return Buffer.concat(pages);
}

function box(type: string, ...parts: Buffer[]): Buffer {
  const body = Buffer.concat(parts);
  const head = Buffer.alloc(8);
  head.writeUInt32BE(8 + body.length, 0);
  head.write(type, 4, 'latin1');
  return Buffer.concat([head, body]);
}

/** M4A as a phone's voice memo: `ftyp` M4A, the audio (`mdat`), then `moov` with its `mvhd` duration. */
export function m4a(seconds: number, kbps = 64): Buffer {
  const mvhd = Buffer.alloc(100);
  mvhd.writeUInt32BE(44_100, 12); // timescale
  mvhd.writeUInt32BE(Math.round(seconds * 44_100), 16); // duration
  return Buffer.concat([box('ftyp', Buffer.from('M4A \0\0\0\0M4A mp42isom', 'latin1')), box('mdat', filler(seconds, kbps)), box('moov', box('mvhd', mvhd))]);
}

/** EBML: an element's ID, its size (8-byte vint, or unknown), its body. */
function ebml(id: number[], body: Buffer, unknownSize = false): Buffer {
  const size = Buffer.alloc(8);
  if (unknownSize) size.set([0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
  else {
    size.writeUInt8(0x01, 0);
    size.writeUIntBE(body.length, 2, 6);
  }
  return Buffer.concat([Buffer.from(id), size, body]);
}

/**
 * WebM as a browser's MediaRecorder writes it: no Duration, clusters of unknown size a second apart, each a run of
 * 20 ms Opus SimpleBlocks (timecodes in ms, relative to their cluster's).
 */
export function webm(seconds: number, kbps = 32, statedMs?: number): Buffer {
  const header = ebml([0x1a, 0x45, 0xdf, 0xa3], ebml([0x42, 0x82], Buffer.from('webm', 'latin1')));
  // TimecodeScale 1,000,000; with `statedMs`, a Duration (an 8-byte float) as a muxer that went back to write it.
  const duration = Buffer.from([0x44, 0x89, 0x88, 0, 0, 0, 0, 0, 0, 0, 0]);
  duration.writeDoubleBE(statedMs ?? 0, 3);
  const scale = Buffer.from([0x2a, 0xd7, 0xb1, 0x83, 0x0f, 0x42, 0x40]);
  const info = ebml([0x15, 0x49, 0xa9, 0x66], statedMs === undefined ? scale : Buffer.concat([scale, duration]));
  const frame = filler(0.02, kbps);
  const clusters: Buffer[] = [];
  for (let start = 0; start < seconds * 1000; start += 1000) {
    const blocks: Buffer[] = [Buffer.from([0xe7, 0x84]), Buffer.alloc(4)];
    blocks[1]?.writeUInt32BE(start);
    for (let t = 0; t < 1000 && start + t < seconds * 1000; t += 20) {
      const time = Buffer.alloc(2);
      time.writeInt16BE(t);
      blocks.push(ebml([0xa3], Buffer.concat([Buffer.from([0x81]), time, Buffer.from([0x80]), frame])));
    }
    clusters.push(ebml([0x1f, 0x43, 0xb6, 0x75], Buffer.concat(blocks), true));
  }
  return Buffer.concat([header, ebml([0x18, 0x53, 0x80, 0x67], Buffer.concat([info, ...clusters]), true)]);
}

/** A file with `count` zero bytes before it, as some recorders and tools pad an MP3 before its tag or first frame. */
export function zeroPadded(file: Buffer, count: number): Buffer {
  return Buffer.concat([Buffer.alloc(count), file]);
}

/**
 * A PCM WAV as RF64 (EBU 3306), as broadcast and field recorders and `ffmpeg -rf64 always` write it: `RF64` and
 * 0xFFFFFFFF for the RIFF and `data` sizes, the real ones in a `ds64` chunk first, then `fmt ` and the audio.
 */
export function rf64(file: Buffer): Buffer {
  const ds64 = Buffer.alloc(8 + 28);
  ds64.write('ds64', 0, 'ascii');
  ds64.writeUInt32LE(28, 4);
  const out = Buffer.concat([file.subarray(0, 12), ds64, file.subarray(12)]);
  out.write('RF64', 0, 'ascii');
  out.writeUInt32LE(0xffffffff, 4);
  const data = out.indexOf('data', 12, 'ascii');
  const size = out.readUInt32LE(data + 4);
  out.writeUInt32LE(0xffffffff, data + 4);
  out.writeBigUInt64LE(BigInt(out.length - 8), 20);
  out.writeBigUInt64LE(BigInt(size), 28);
  out.writeBigUInt64LE(BigInt(size / (out.readUInt16LE(out.indexOf('fmt ', 12, 'ascii') + 20) || 1)), 36);
  return out;
}

/** A file with an ID3v2 tag (a title) put before it, as some taggers do to FLAC too. */
export function id3Tagged(file: Buffer): Buffer {
  const frame = Buffer.from('TIT2\0\0\0\x06\0\0\x03Memo\0', 'latin1');
  const header = Buffer.from('ID3\x04\x00\x00\x00\x00\x00\x00', 'latin1');
  header.writeUInt8(frame.length, 9);
  return Buffer.concat([header, frame, file]);
}

/** A full box: version 0, no flags, then its fields. */
function fullBox(type: string, fields: number[], flags = 0): Buffer {
  const body = Buffer.alloc(4 + 4 * fields.length);
  body.writeUInt32BE(flags, 0);
  for (const [i, f] of fields.entries()) body.writeUInt32BE(f, 4 + 4 * i);
  return box(type, body);
}

/**
 * Fragmented M4A as Safari's MediaRecorder writes it: `mvhd` with no duration, a track at 48 kHz, then a `moof` and
 * `mdat` a second, each fragment's `trun` 1,024-sample AAC frames (their durations stated in every other fragment,
 * the `trex` default in the rest).
 */
export function m4aFragmented(seconds: number, kbps = 32): Buffer {
  // mvhd: creation, modification, timescale 1000, duration 0; tkhd: creation, modification, track 1; mdhd: timescale 48 kHz.
  const moov = box(
    'moov',
    fullBox('mvhd', [0, 0, 1000, 0, ...Array(20).fill(0)]),
    box('trak', fullBox('tkhd', [0, 0, 1, 0, 0, ...Array(15).fill(0)]), box('mdia', fullBox('mdhd', [0, 0, 48_000, 0, 0]))),
    box('mvex', fullBox('trex', [1, 1, 1024, 0, 0])),
  );
  const frames = Math.floor((seconds * 48_000) / 1024);
  const parts: Buffer[] = [box('ftyp', Buffer.from('iso5\0\0\0\0iso5isomiso6mp41', 'latin1')), moov];
  for (let first = 0, n = 0; first < frames; first += 47, n++) {
    const count = Math.min(47, frames - first);
    const mdat = filler(count / 46.875, kbps);
    const size = Math.ceil(mdat.length / count);
    // trun: sample count, then each sample's duration and size (flags 0x300) or its size alone (0x200).
    const stated = n % 2 === 0;
    const samples = Array.from({ length: count }, () => (stated ? [1024, size] : [size])).flat();
    const traf = box('traf', fullBox('tfhd', [1], 0x20000), fullBox('trun', [count, ...samples], stated ? 0x300 : 0x200));
    parts.push(box('moof', fullBox('mfhd', [n + 1]), traf), box('mdat', mdat));
  }
  return Buffer.concat(parts);
}
