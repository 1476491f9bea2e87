import { describe, expect, it } from 'vitest';
import { wavByteRate } from '../src/http/transcript-render.js';
import { wav, withChunkBeforeFmt } from './helpers/audio.js';

describe('the byte rate a WAV upload is held at (its worst-case seconds)', () => {
  it('is the header’s own for an honest PCM header', () => {
    expect(wavByteRate(wav(0.1))).toBe(32_000);
    expect(wavByteRate(wav(0.1, 8_000))).toBe(16_000);
  });

  it('is the lowest its fields give when the stated byte rate does not match them, as decoders time PCM by the sample rate', () => {
    const lying = wav(0.1, 8_000);
    lying.writeUInt32LE(4_000_000_000, 28);
    expect(wavByteRate(lying)).toBe(16_000);
    // 8-bit mono at 8 kHz: 8,000 bytes a second, whatever the header says it is.
    lying.writeUInt16LE(1, 32);
    lying.writeUInt16LE(8, 34);
    expect(wavByteRate(lying)).toBe(8_000);
  });

  it('is read from a fmt chunk that other chunks come before (Core Audio’s JUNK, a broadcast WAV’s bext)', () => {
    expect(wavByteRate(withChunkBeforeFmt(wav(0.1), 'JUNK', 28))).toBe(32_000);
    expect(wavByteRate(withChunkBeforeFmt(withChunkBeforeFmt(wav(0.1, 8_000), 'bext', 603), 'JUNK', 28))).toBe(16_000);
    // Past the head it is given, or after the data: unknown (held at the lowest speech rate).
    expect(wavByteRate(withChunkBeforeFmt(wav(0.1), 'bext', 602).subarray(0, 64))).toBeNull();
  });

  it('is unknown for what is not a RIFF/WAVE header', () => {
    expect(wavByteRate(Buffer.from('ID3\u0004 not a wav file at all, an mp3 perhaps..........'))).toBeNull();
  });
});
