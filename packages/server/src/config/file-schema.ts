import { MODEL_KINDS, OPENAI_VENDORS, PROVIDER_TYPES } from '@gw/schema';
import { type Static, Type } from '@sinclair/typebox';

const Id = Type.String({ minLength: 1, maxLength: 100, pattern: '^[A-Za-z0-9._-]+$' });
const Price = Type.Number({ minimum: 0 });

export const PricingSchema = Type.Object(
  {
    prompt_per_1m: Price,
    completion_per_1m: Price,
    // Budgets and spent add costs up in EUR (INTERFACES.md): a price in another currency would be summed as if it were EUR.
    currency: Type.Literal('EUR'),
    per_unit: Type.Optional(Price),
  },
  { additionalProperties: false },
);

export const ProviderSchema = Type.Object(
  {
    id: Id,
    type: Type.Union(PROVIDER_TYPES.map((t) => Type.Literal(t))),
    baseUrl: Type.String({ pattern: '^https?://' }),
    apiKey: Type.Optional(Type.String()),
    region: Type.String({ minLength: 1 }),
    timeoutMs: Type.Optional(Type.Integer({ minimum: 1, maximum: 3_600_000 })),
    connectTimeoutMs: Type.Optional(Type.Integer({ minimum: 1, maximum: 600_000 })),
    apiVersion: Type.Optional(Type.String({ minLength: 1 })),
    vendor: Type.Optional(Type.Union(OPENAI_VENDORS.map((v) => Type.Literal(v)))),
  },
  { additionalProperties: false },
);

export const OfferSchema = Type.Object(
  {
    provider: Id,
    upstreamModel: Type.String({ minLength: 1 }),
    pricing: PricingSchema,
  },
  { additionalProperties: false },
);

export const ModelSchema = Type.Object(
  {
    // At most what a request's `model` field takes: a longer id was listed, and every request naming it refused.
    id: Type.String({ pattern: '^[A-Za-z0-9._-]+/[A-Za-z0-9._:-]+$', maxLength: 200 }),
    kind: Type.Union(MODEL_KINDS.map((k) => Type.Literal(k))),
    owned_by: Type.String({ minLength: 1 }),
    context_window: Type.Optional(Type.Integer({ minimum: 1 })),
    capabilities: Type.Optional(Type.Array(Type.String())),
    deprecated: Type.Optional(Type.Boolean()),
    beta: Type.Optional(Type.Boolean()),
    offers: Type.Array(OfferSchema, { minItems: 1 }),
  },
  { additionalProperties: false },
);

export const FileConfigSchema = Type.Object(
  {
    providers: Type.Array(ProviderSchema, { minItems: 1 }),
    models: Type.Array(ModelSchema),
  },
  { additionalProperties: false },
);

export type FileConfig = Static<typeof FileConfigSchema>;
