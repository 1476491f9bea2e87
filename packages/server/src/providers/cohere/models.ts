import { UpstreamError } from '../../errors/upstream-error.js';
import type { JsonResponse } from '../http-client.js';
import { cohereError } from './errors.js';

/** One page of `GET /v1/models`: `{models:[{name, endpoints, …}], next_page_token?}`. */
export function parseCohereModelsPage(provider: string, res: JsonResponse): { names: string[]; next: string | null } {
  if (res.status !== 200) throw cohereError(provider, res);
  const body = res.body as { models?: unknown; next_page_token?: unknown } | null;
  if (!body || !Array.isArray(body.models)) throw new UpstreamError({ kind: 'protocol', provider, message: `${provider} models list has no models array` });
  const names = body.models.flatMap((m) => (typeof (m as { name?: unknown } | null)?.name === 'string' ? [(m as { name: string }).name] : []));
  const next = typeof body.next_page_token === 'string' && body.next_page_token !== '' ? body.next_page_token : null;
  return { names, next };
}
