import type { GatewayFileConfig, Pricing } from '@gw/schema';
import { estimateTokens } from '../providers/usage-estimate.js';

/**
 * Rerank and audio offers are billed by `pricing.per_unit` (per search unit, per audio second) when they have one,
 * else by their token prices, the shape INTERFACES.md gives every offer: an offer without `per_unit` is not free
 * (docs/decisions.md, billing of rerank and audio).
 */
export interface UnitBill {
  promptTokens: number;
  completionTokens: number;
  cost: number;
}

/** Tokens an audio second counts for when the provider gives no count: Voxtral's audio encoder rate. */
export const AUDIO_TOKENS_PER_SECOND = 12.5;
/** The most transcript tokens a second of audio yields, for the hold: Whisper writes at most 448 tokens per 30 s window. */
export const MAX_TRANSCRIPT_TOKENS_PER_SECOND = 15;

function tokenCost(pricing: Pricing, prompt: number, completion: number): number {
  return (prompt * pricing.prompt_per_1m + completion * pricing.completion_per_1m) / 1_000_000;
}

/** A rerank's bill: its search units at `per_unit`, else its tokens (the provider's count, else the estimate) at `prompt_per_1m`. */
export function rerankBill(pricing: Pricing, searchUnits: number, tokens: number): UnitBill {
  if (pricing.per_unit !== undefined) return { promptTokens: 0, completionTokens: 0, cost: searchUnits * pricing.per_unit };
  return { promptTokens: tokens, completionTokens: 0, cost: tokenCost(pricing, tokens, 0) };
}

export interface AudioTokens {
  input: number;
  output: number;
}

/** The most tokens a transcription of `seconds` of audio is billed without a provider count beyond its length: the hold's. */
export function worstAudioTokens(seconds: number): AudioTokens {
  return { input: Math.ceil(seconds * AUDIO_TOKENS_PER_SECOND), output: Math.ceil(seconds * MAX_TRANSCRIPT_TOKENS_PER_SECOND) };
}

/** Without a provider count: the audio's seconds at {@link AUDIO_TOKENS_PER_SECOND}, and the transcript at 3 characters a token. */
export function estimatedAudioTokens(seconds: number, text: string): AudioTokens {
  return { input: Math.ceil(seconds * AUDIO_TOKENS_PER_SECOND), output: text === '' ? 0 : estimateTokens([text], 3) };
}

/** A transcription's bill: its seconds at `per_unit`, else its tokens at the prompt (audio) and completion (transcript) prices. */
export function audioBill(pricing: Pricing, seconds: number, tokens: AudioTokens): UnitBill {
  if (pricing.per_unit !== undefined) return { promptTokens: 0, completionTokens: 0, cost: seconds * pricing.per_unit };
  return { promptTokens: tokens.input, completionTokens: tokens.output, cost: tokenCost(pricing, tokens.input, tokens.output) };
}

/** What the start logs for each rerank or audio offer without `per_unit`: how it is billed instead. */
export function tokenPricedOffers(catalogue: GatewayFileConfig): { model: string; provider: string; message: string }[] {
  const out: { model: string; provider: string; message: string }[] = [];
  for (const m of catalogue.models) {
    if (m.kind !== 'rerank' && m.kind !== 'audio') continue;
    for (const o of m.offers) {
      if (o.pricing.per_unit !== undefined) continue;
      const how =
        m.kind === 'rerank'
          ? `its reranks are billed by tokens at prompt_per_1m (${o.pricing.prompt_per_1m} EUR a million tokens): the provider's count, else the query with each document at 3 characters a token`
          : `its transcriptions are billed by tokens: the provider's count, else ${AUDIO_TOKENS_PER_SECOND} tokens per audio second at prompt_per_1m (${o.pricing.prompt_per_1m} EUR a million tokens) and the transcript at 3 characters a token at completion_per_1m (${o.pricing.completion_per_1m} EUR a million tokens)`;
      out.push({
        model: m.id,
        provider: o.provider,
        message: `the ${m.kind} model ${m.id}'s offer from ${o.provider} has no pricing.per_unit: ${how}. Set per_unit to bill per ${m.kind === 'rerank' ? 'search unit' : 'audio second'}.`,
      });
    }
  }
  return out;
}
