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
