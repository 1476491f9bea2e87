import swagger from '@fastify/swagger';
import type { FastifyInstance } from 'fastify';
import { documentErrors } from './openapi-errors.js';
import { documentHeaders } from './openapi-headers.js';
import { describeSuccesses } from './openapi-successes.js';

/** Registers the OpenAPI 3.1 generator; the document is built from the routes' own schemas. */
export async function registerOpenApi(app: FastifyInstance, version: string): Promise<void> {
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'gw: EU model gateway',
        version,
        description: 'OpenAI-compatible gateway to EU-hosted AI providers. Variant A at /v1, variant B at /alt/v1.',
      },
      servers: [{ url: '/' }],
      components: {
        securitySchemes: {
          bearerAuth: { type: 'http', scheme: 'bearer', description: 'An API key, gw_live_…' },
          adminToken: { type: 'http', scheme: 'bearer', description: 'GW_ADMIN_TOKEN' },
        },
      },
    },
  });
}

/** GET /openapi.json and its identical copy under /dashboard. */
export function openApiRoutes(app: FastifyInstance): void {
  let doc: unknown;
  // Built once, on first request: every route is registered by then.
  const handler = async () => {
    doc ??= describeSuccesses(documentErrors(documentHeaders(structuredClone(app.swagger()) as Parameters<typeof documentHeaders>[0])));
    return doc;
  };
  app.get('/openapi.json', { schema: { hide: true } }, handler);
  app.get('/dashboard/openapi.json', { schema: { hide: true } }, handler);
}
