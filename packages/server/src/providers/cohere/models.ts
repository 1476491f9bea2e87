import { UpstreamError } from '../../errors/upstream-error.js';
import type { JsonResponse, UpstreamHttp } from '../http-client.js';
import { cohereError } from './errors.js';

/** One page of `GET /v1/models`: `{models:[{name, endpoints, …}], next_page_token?}`. */
export function parseCohereModelsPage(provider: string, res: JsonResponse): { names: string[]; next: string | null } {
  if (res.status !== 200) throw cohereError(provider, res);
  const body = res.body as { models?: unknown; next_page_token?: unknown } | null;
  if (!body || !Array.isArray(body.models)) throw new UpstreamError({ kind: 'protocol', provider, message: `${provider} models list has no models array` });
  const names = body.models.flatMap((m) => (typeof (m as { name?: unknown } | null)?.name === 'string' ? [(m as { name: string }).name] : []));
  // Entries, none of them a model with a name: a broken answer (the last good list is kept), not an empty catalogue.
  if (names.length === 0 && body.models.length > 0)
    throw new UpstreamError({ kind: 'protocol', provider, message: `${provider} models list has entries but no model names` });
  const next = typeof body.next_page_token === 'string' && body.next_page_token !== '' ? body.next_page_token : null;
  return { names, next };
}

const MAX_MODEL_PAGES = 20;

/** Every name of Cohere's `GET {prefix}/v1/models`, page after page (`next_page_token`). */
export async function listCohereModels(http: UpstreamHttp, prefix: string, headers: Record<string, string>, signal?: AbortSignal): Promise<string[]> {
  const names: string[] = [];
  let token: string | null = null;
  for (let page = 0; page < MAX_MODEL_PAGES; page++) {
    const query = `page_size=1000${token ? `&page_token=${encodeURIComponent(token)}` : ''}`;
    const res = await http.json({ method: 'GET', path: `${prefix}/v1/models?${query}`, headers, ...(signal ? { signal } : {}) });
    const { names: found, next } = parseCohereModelsPage(http.providerId, res);
    names.push(...found);
    if (next === null) break;
    token = next;
  }
  return names;
}
