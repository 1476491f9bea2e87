import { UpstreamError } from '../../errors/upstream-error.js';
import type { JsonResponse } from '../http-client.js';
import { httpError } from './errors.js';

/** `GET /models` → `{ object: 'list', data: [{ id }] }` → the ids. */
export function parseModelList(provider: string, res: JsonResponse): string[] {
  if (res.status !== 200) throw httpError(provider, res);
  const data = (res.body as { data?: unknown } | null)?.data;
  if (!Array.isArray(data)) throw new UpstreamError({ kind: 'protocol', provider, message: `${provider} models list has no data array` });
  const ids = data.flatMap((m) => (m && typeof m === 'object' && typeof (m as { id?: unknown }).id === 'string' ? [(m as { id: string }).id] : []));
  // Entries, none of them a model with an id: a broken answer (the last good list is kept), not an empty catalogue.
  if (ids.length === 0 && data.length > 0)
    throw new UpstreamError({ kind: 'protocol', provider, message: `${provider} models list has entries but no model ids` });
  return ids;
}
