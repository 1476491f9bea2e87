import type { RegistryModel } from '../../routing/registry.js';
import type { EnabledModels } from '../model-access.js';

/** Variant B's model fields: providers, regions, capabilities, context window and pricing. */
export function modelViewB(m: RegistryModel) {
  const first = m.offers[0];
  return {
    // No `object`: SPEC gives that field to variant A's model only.
    id: m.id,
    created: m.created,
    owned_by: m.owned_by,
    providers: [...new Set(m.offers.map((o) => o.provider))],
    regions: [...new Set(m.offers.map((o) => o.region))],
    capabilities: m.capabilities,
    context_window: m.context_window,
    // The price of the first offer in configured order, as a guide; each request is billed at the offer that served it.
    pricing: {
      prompt_per_1m: first?.pricing.prompt_per_1m ?? 0,
      completion_per_1m: first?.pricing.completion_per_1m ?? 0,
      currency: first?.pricing.currency ?? 'EUR',
      // Rerank and audio are billed per unit, not per token: their price would otherwise read as free.
      ...(first?.pricing.per_unit !== undefined && m.kind in BILLING_UNIT
        ? { per_unit: first.pricing.per_unit, unit: BILLING_UNIT[m.kind as keyof typeof BILLING_UNIT] }
        : {}),
    },
  };
}

/** What `per_unit` prices, by model kind. */
const BILLING_UNIT = { rerank: 'search_unit', audio: 'audio_second' } as const;

export interface ModelsQueryB {
  family?: string;
  capability?: string;
  provider?: string;
}

/**
 * B lists only models enabled for the caller's workspace (null: all), and the beta embeddings only. Its filters match
 * in any letter case (`capability=VISION`, `family=Mistral`): ids and capabilities are lower case, and a value off
 * only in case is the one meant, where an empty list would read as none there (README, Models).
 */
export function filterModelsB(models: RegistryModel[], query: ModelsQueryB, enabled: EnabledModels): RegistryModel[] {
  const family = query.family?.toLowerCase();
  const capability = query.capability?.toLowerCase();
  const provider = query.provider?.toLowerCase();
  return models.filter(
    (m) =>
      !m.deprecated &&
      (m.kind !== 'embedding' || m.beta) &&
      (enabled === null || enabled.has(m.id)) &&
      (family === undefined || m.id.split('/')[0]?.toLowerCase() === family || m.owned_by.toLowerCase() === family) &&
      (capability === undefined || m.capabilities.some((c) => c.toLowerCase() === capability)) &&
      (provider === undefined || m.offers.some((o) => o.provider.toLowerCase() === provider)),
  );
}
