import type { ScannedResponse } from '../http-client.js';
import { type ScannedList, scannedIds } from '../model-list-scan.js';
import { httpError } from './errors.js';

/** `GET /models` → `{ object: 'list', data: [{ id }] }`, scanned as it arrives (providers/model-list-scan.ts) → the ids. */
export function parseModelList(provider: string, res: ScannedResponse<ScannedList>): string[] {
  if (res.scanned === undefined) throw httpError(provider, res);
  return scannedIds(provider, res.scanned);
}
