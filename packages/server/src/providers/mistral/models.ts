import { UpstreamError } from '../../errors/upstream-error.js';
import type { ScannedResponse } from '../http-client.js';
import { listScanError, type ScannedList } from '../model-list-scan.js';
import { mistralError } from './errors.js';

/** `GET /v1/models`: every id and every alias (an offer may name `mistral-small-latest` or `mistral-small-2506`), scanned as it arrives. */
export function parseMistralModels(provider: string, res: ScannedResponse<ScannedList>): string[] {
  if (res.scanned === undefined) throw mistralError(provider, res);
  const list = res.scanned;
  if (!list.ok) throw listScanError(provider, list.why);
  // Entries, none of them a model with an id: a broken answer (the last good list is kept), not an empty catalogue.
  if (list.ids.length === 0 && list.entries > 0)
    throw new UpstreamError({ kind: 'protocol', provider, message: `${provider} models list has entries but no model ids` });
  return list.ids;
}
