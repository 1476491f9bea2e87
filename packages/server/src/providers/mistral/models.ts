import { UpstreamError } from '../../errors/upstream-error.js';
import type { JsonResponse } from '../http-client.js';
import { mistralError } from './errors.js';

/** `GET /v1/models`: every id and every alias (an offer may name `mistral-small-latest` or `mistral-small-2506`). */
export function parseMistralModels(provider: string, res: JsonResponse): string[] {
  if (res.status !== 200) throw mistralError(provider, res);
  const data = (res.body as { data?: unknown } | null)?.data;
  if (!Array.isArray(data)) throw new UpstreamError({ kind: 'protocol', provider, message: `${provider} models list has no data array` });
  const names = new Set<string>();
  for (const m of data) {
    const entry = (m ?? {}) as { id?: unknown; aliases?: unknown };
    if (typeof entry.id === 'string') names.add(entry.id);
    if (Array.isArray(entry.aliases)) for (const a of entry.aliases) if (typeof a === 'string') names.add(a);
  }
  // Entries, none of them a model with an id: a broken answer (the last good list is kept), not an empty catalogue.
  if (names.size === 0 && data.length > 0)
    throw new UpstreamError({ kind: 'protocol', provider, message: `${provider} models list has entries but no model ids` });
  return [...names];
}
