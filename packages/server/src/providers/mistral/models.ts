import type { ScannedResponse } from '../http-client.js';
import { type ScannedList, scannedIds } from '../model-list-scan.js';
import { mistralError } from './errors.js';

/** `GET /v1/models`: every id and every alias (an offer may name `mistral-small-latest` or `mistral-small-2506`), scanned as it arrives. */
export function parseMistralModels(provider: string, res: ScannedResponse<ScannedList>): string[] {
  if (res.scanned === undefined) throw mistralError(provider, res);
  return scannedIds(provider, res.scanned);
}
