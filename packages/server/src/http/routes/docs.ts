import { errorEnvelopeSchema, type Variant } from '@gw/schema';
import type { FastifySchema } from 'fastify';

/** Builds route schemas that double as OpenAPI operations, one id per variant. */
export interface RouteDocs {
  variant: Variant;
  operation(id: string, summary: string, schema: FastifySchema & { response?: Record<string, unknown> }, tags?: string[]): FastifySchema;
}

export function routeDocs(variant: Variant): RouteDocs {
  const error = errorEnvelopeSchema(variant);
  const tag = variant === 'a' ? 'Variant A' : 'Variant B';
  return {
    variant,
    operation(id, summary, schema, tags = [tag]) {
      return {
        ...schema,
        operationId: `${variant}_${id}`,
        summary,
        tags,
        security: [{ bearerAuth: [] }],
        response: { ...(schema.response ?? {}), '4XX': error, '5XX': error },
      } as FastifySchema;
    },
  };
}
