import type { ModelKind } from '@gw/schema';
import type { RegistryModel } from '../../routing/registry.js';

/** Variant A's model fields: id, object, kind, owned_by. */
export function modelViewA(m: RegistryModel) {
  return { id: m.id, object: 'model' as const, created: m.created, kind: m.kind, owned_by: m.owned_by };
}

export function filterModelsA(models: RegistryModel[], query: { kind?: ModelKind }): RegistryModel[] {
  return models.filter((m) => !m.deprecated && (query.kind === undefined || m.kind === query.kind));
}
