import { UpstreamError } from '../../errors/upstream-error.js';
import type { JsonResponse } from '../http-client.js';
import { azureError } from './errors.js';

/** `{data:[{id, …}]}` (deployments, or a models list) → its ids; an error answer or a list without `data` throws. */
export function parseAzureList(provider: string, res: JsonResponse): string[] {
  if (res.status !== 200) throw azureError(provider, res);
  const data = (res.body as { data?: unknown } | null)?.data;
  if (!Array.isArray(data)) throw new UpstreamError({ kind: 'protocol', provider, message: `${provider} list has no data array` });
  const ids = data.flatMap((d) => (typeof (d as { id?: unknown } | null)?.id === 'string' ? [(d as { id: string }).id] : []));
  // Entries, none of them with an id: a broken answer (the last good list is kept), not an empty list of deployments.
  if (ids.length === 0 && data.length > 0) throw new UpstreamError({ kind: 'protocol', provider, message: `${provider} list has entries but no ids` });
  return ids;
}
