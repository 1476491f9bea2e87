/** The /__sim control routes of one provider server (no auth; loopback test harness). */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Fault, ProviderSettings } from '../types.js';
import { isRecord, readBody, sendJson } from './http.js';

/** What control routes need of a provider. */
export interface Controllable {
  id: string;
  type: string;
  region: string;
  url: string;
  baseUrl: string;
  settings: ProviderSettings;
  faults: { get(): Fault | null; set(f: Fault): void; clear(): void };
  stats: { snapshot(): unknown; reset(): void };
  models(): string[];
  setModels(models: string[]): void;
  configure(s: Partial<ProviderSettings>): void;
  reset(): void;
}

const SETTING_KEYS = new Set(['latencyMs', 'ttftMs', 'chunkGapMs', 'reasoningStyle', 'asyncContentFilter', 'answerTokens', 'toolCallFragments']);

export async function handleControl(p: Controllable, req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
  const method = req.method ?? 'GET';
  const raw = await readBody(req, 1024 * 1024);
  let body: unknown = null;
  if (raw.length > 0) {
    try {
      body = JSON.parse(raw.toString('utf8'));
    } catch {
      return sendJson(res, 400, { error: 'invalid JSON' });
    }
  }
  const route = `${method} ${path}`;
  try {
    switch (route) {
      case 'GET /__sim/stats':
        return sendJson(res, 200, p.stats.snapshot());
      case 'POST /__sim/stats/reset':
        p.stats.reset();
        return sendJson(res, 200, { ok: true });
      case 'POST /__sim/reset':
        p.reset();
        return sendJson(res, 200, { ok: true });
      case 'GET /__sim/info':
        return sendJson(res, 200, { id: p.id, type: p.type, region: p.region, url: p.url, baseUrl: p.baseUrl });
      case 'GET /__sim/faults':
        return sendJson(res, 200, { fault: p.faults.get() });
      case 'DELETE /__sim/faults':
        p.faults.clear();
        return sendJson(res, 200, { fault: null });
      case 'POST /__sim/faults': {
        const clear = body === null || (isRecord(body) && (body['clear'] === true || Object.keys(body).length === 0));
        if (clear) p.faults.clear();
        else p.faults.set(body as Fault);
        return sendJson(res, 200, { fault: p.faults.get() });
      }
      case 'GET /__sim/models':
        return sendJson(res, 200, { models: p.models() });
      case 'PUT /__sim/models':
      case 'POST /__sim/models': {
        const models = isRecord(body) ? body['models'] : body;
        if (!Array.isArray(models) || !models.every((m) => typeof m === 'string')) throw new Error('expected { "models": string[] }');
        p.setModels(models);
        return sendJson(res, 200, { models: p.models() });
      }
      case 'GET /__sim/settings':
        return sendJson(res, 200, p.settings);
      case 'POST /__sim/settings': {
        if (!isRecord(body) || !Object.keys(body).every((k) => SETTING_KEYS.has(k))) {
          throw new Error(`settings keys: ${[...SETTING_KEYS].join(', ')}`);
        }
        p.configure(body as Partial<ProviderSettings>);
        return sendJson(res, 200, p.settings);
      }
      default:
        return sendJson(res, 404, { error: `unknown control route ${route}` });
    }
  } catch (err) {
    return sendJson(res, 400, { error: err instanceof Error ? err.message : String(err) });
  }
}
