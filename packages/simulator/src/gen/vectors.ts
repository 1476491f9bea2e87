/** Deterministic embeddings: the same text always gives the same unit vector. */

/** FNV-1a 32-bit hash. */
export function hash32(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * Unit vector of `dim` floats for `text`. A smaller `dim` is a prefix of the full vector, renormalised
 * (matryoshka-style), so truncation is consistent across calls.
 */
export function embedText(text: string, dim: number): number[] {
  const next = mulberry32(hash32(text));
  const v = new Array<number>(dim);
  let norm = 0;
  for (let i = 0; i < dim; i++) {
    const x = next() * 2 - 1;
    v[i] = x;
    norm += x * x;
  }
  const scale = norm > 0 ? 1 / Math.sqrt(norm) : 0;
  for (let i = 0; i < dim; i++) v[i] = Math.round((v[i] ?? 0) * scale * 1e7) / 1e7;
  return v;
}

/** Little-endian float32 bytes, base64 (OpenAI's `encoding_format: "base64"`). */
export function toBase64(v: number[]): string {
  const buf = Buffer.allocUnsafe(v.length * 4);
  for (let i = 0; i < v.length; i++) buf.writeFloatLE(v[i] ?? 0, i * 4);
  return buf.toString('base64');
}

export type EmbeddingType = 'float' | 'int8' | 'uint8' | 'binary' | 'ubinary' | 'base64';
export const EMBEDDING_TYPES: readonly EmbeddingType[] = ['float', 'int8', 'uint8', 'binary', 'ubinary', 'base64'];

/** Quantised forms (Mistral `output_dtype`, Cohere `embedding_types`). Binary packs 8 dims per value. */
export function encodeAs(v: number[], type: EmbeddingType): number[] | string {
  switch (type) {
    case 'float':
      return v;
    case 'base64':
      return toBase64(v);
    case 'int8':
      return v.map((x) => Math.max(-128, Math.min(127, Math.round(x * 127 * 8))));
    case 'uint8':
      return v.map((x) => Math.max(0, Math.min(255, Math.round(x * 127 * 8 + 128))));
    case 'binary':
    case 'ubinary': {
      const out: number[] = [];
      for (let i = 0; i < v.length; i += 8) {
        let byte = 0;
        for (let j = 0; j < 8; j++) byte = (byte << 1) | ((v[i + j] ?? 0) > 0 ? 1 : 0);
        out.push(type === 'binary' ? byte - 128 : byte);
      }
      return out;
    }
  }
}
