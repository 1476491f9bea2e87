import { createHash } from 'node:crypto';
import swagger from '@fastify/swagger';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
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

/**
 * GET /openapi.json and its identical copy under /dashboard: the same bytes every time, serialised once (the document
 * is some 800 KB, whose serialisation took 7 ms a request), with a strong ETag for a client to revalidate it by
 * (If-None-Match: 304, no body) and `no-cache` so that it does, as the document changes with each release.
 */
export function openApiRoutes(app: FastifyInstance): void {
  let built: { body: Buffer; etag: string } | undefined;
  // Built once, on first request: every route is registered by then.
  const build = () => {
    const doc = formEncodings(
      optionalBodies(describeSuccesses(documentErrors(documentHeaders(structuredClone(app.swagger()) as Parameters<typeof documentHeaders>[0])))),
    );
    const body = Buffer.from(JSON.stringify(doc));
    return { body, etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 27)}"` };
  };
  const handler = async (request: FastifyRequest, reply: FastifyReply) => {
    built ??= build();
    reply.header('etag', built.etag).header('cache-control', 'no-cache');
    if (matches(request.headers['if-none-match'], built.etag)) return reply.code(304).send();
    reply.type('application/json; charset=utf-8');
    // HEAD is this route's own: Fastify's derived one put `content-length: 0` on a 304 (RFC 9110 8.6: only the
    // length a 200 would have, if any), read by a cache as the document's length.
    if (request.method === 'HEAD') return reply.header('content-length', built.body.length).send();
    return reply.send(built.body);
  };
  for (const url of ['/openapi.json', '/dashboard/openapi.json'])
    app.route({ method: ['GET', 'HEAD'], url, exposeHeadRoute: false, schema: { hide: true }, handler });
}

/** If-None-Match as RFC 9110 reads it: `*`, or a list of tags compared weakly (a W/ prefix is no difference). */
function matches(header: string | undefined, etag: string): boolean {
  if (header === undefined) return false;
  if (header.trim() === '*') return true;
  return header.split(',').some((tag) => tag.trim().replace(/^W\//, '') === etag);
}

interface BodySchema {
  required?: unknown[];
  minProperties?: number;
}

/**
 * The generator marks every body required, as Fastify's schema would have it; the admin routes take none where each
 * field is optional (POST /admin/v1/keys reads no body as `{}`), so a client built from the document may leave it out.
 */
function optionalBodies<D>(doc: D): D {
  const paths = (doc as { paths?: Record<string, Record<string, { requestBody?: { required?: boolean; content?: Record<string, { schema?: BodySchema }> } }>> })
    .paths;
  for (const ops of Object.values(paths ?? {})) {
    for (const op of Object.values(ops)) {
      const body = op.requestBody;
      const schema = body?.content?.['application/json']?.schema;
      if (body && schema && !schema.required?.length && !schema.minProperties) body.required = false;
    }
  }
  return doc;
}

interface FormSchema {
  properties?: Record<string, { type?: string; contentMediaType?: string; format?: string }>;
}

/**
 * A multipart form's lists and files, written out: OpenAPI leaves an array's encoding in a form to each tool (some
 * send one JSON part `["en","fr"]`, some `en,fr`), where the gateway takes each item as its own part (`languages` or
 * `languages[]` repeated); and generators that predate OpenAPI 3.1 know a file part by `format: binary` alone.
 */
function formEncodings<D>(doc: D): D {
  const paths = (doc as { paths?: Record<string, Record<string, { requestBody?: { content?: Record<string, { schema?: FormSchema; encoding?: unknown }> } }>> })
    .paths;
  for (const ops of Object.values(paths ?? {})) {
    for (const op of Object.values(ops)) {
      const form = op.requestBody?.content?.['multipart/form-data'];
      if (!form?.schema?.properties) continue;
      const encoding: Record<string, unknown> = {};
      for (const [name, property] of Object.entries(form.schema.properties)) {
        if (property.type === 'array') encoding[name] = { style: 'form', explode: true };
        if (property.type === 'string' && property.contentMediaType) property.format = 'binary';
      }
      if (Object.keys(encoding).length > 0) form.encoding = encoding;
    }
  }
  return doc;
}
