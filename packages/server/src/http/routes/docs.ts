import { errorEnvelopeSchema, type Variant } from '@gw/schema';
import type { FastifySchema } from 'fastify';

/** Builds route schemas that double as OpenAPI operations, one id per variant. */
export interface RouteDocs {
  variant: Variant;
  operation(id: string, summary: string, schema: FastifySchema & { response?: Record<string, unknown> }, tags?: string[]): FastifySchema;
}

/** `mount`: a second mount of some routes (Cohere's v2 paths), whose operations get ids and a tag of their own. */
export function routeDocs(variant: Variant, mount?: { idPrefix: string; tag: string }): RouteDocs {
  const error = errorEnvelopeSchema(variant);
  const tag = `${variant === 'a' ? 'Variant A' : 'Variant B'}${mount ? `: ${mount.tag}` : ''}`;
  return {
    variant,
    operation(id, summary, schema, tags = [tag]) {
      return {
        ...schema,
        operationId: `${variant}_${mount?.idPrefix ?? ''}${id}`,
        summary,
        tags,
        security: [{ bearerAuth: [] }],
        response: { ...(schema.response ?? {}), '4XX': error, '5XX': error },
      } as FastifySchema;
    },
  };
}
