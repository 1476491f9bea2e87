import { readFileSync } from 'node:fs';
import { validate } from '@scalar/openapi-parser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';

let gw: TestGateway;
beforeAll(async () => {
  gw = await startGateway();
});
afterAll(() => gw?.close());

const SPEC_ROUTES = [
  'post /v1/chat/completions',
  'post /v1/embeddings',
  'post /v1/rerank',
  'post /v1/audio/transcriptions',
  'get /v1/models',
  'get /v1/models/{id}',
  'post /v1/files',
  'get /v1/files',
  'get /v1/files/{id}',
  'delete /v1/files/{id}',
  'post /v1/batches',
  'get /v1/batches',
  'get /v1/batches/{id}',
  'post /v1/batches/{id}/cancel',
  'post /v1/webhooks',
  'get /v1/webhooks',
  'get /v1/usage',
  'get /v1/usage/summary',
];

describe('OpenAPI 3.1', () => {
  it('is valid, versioned from package.json, identical at both addresses, and lists every SPEC route in both variants', async () => {
    const doc = (await (await fetch(`${gw.url}/openapi.json`)).json()) as {
      openapi: string;
      info: { version: string };
      paths: Record<string, Record<string, unknown>>;
    };
    const copy = await (await fetch(`${gw.url}/dashboard/openapi.json`)).json();
    expect(copy).toEqual(doc);
    expect(doc.openapi).toBe('3.1.0');
    const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string };
    expect(doc.info.version).toBe(pkg.version);
    const result = await validate(doc);
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
    const have = new Set(Object.entries(doc.paths).flatMap(([path, ops]) => Object.keys(ops).map((m) => `${m} ${path}`)));
    for (const route of SPEC_ROUTES) {
      expect(have, route).toContain(route);
      const [method, path] = route.split(' ') as [string, string];
      expect(have, `B ${route}`).toContain(`${method} /alt${path}`);
    }
    expect(have).toContain('post /admin/v1/keys');
    expect(have).not.toContain('get /healthz');
  });

  it('documents each variant with its own error codes', async () => {
    const doc = (await (await fetch(`${gw.url}/openapi.json`)).json()) as {
      paths: Record<string, Record<string, { responses: Record<string, { content: Record<string, { schema: unknown }> }> }>>;
    };
    const a = JSON.stringify(doc.paths['/v1/chat/completions']?.post?.responses['4XX']);
    const b = JSON.stringify(doc.paths['/alt/v1/chat/completions']?.post?.responses['4XX']);
    expect(a).toContain('validation_error');
    expect(a).not.toContain('invalid_request');
    expect(b).toContain('invalid_request');
    expect(b).toContain('provider_unsupported');
  });
});
